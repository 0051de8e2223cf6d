"""`onnxcomp maxbatch`: the largest batch whose *measured* training-step peak fits a memory budget.

GACT's protocol (its benchmark's max-batch search), with measured peaks instead of an allocator's failure:
for each probed batch, export the model, generate ORT training artifacts, apply the policy and run
``measure`` in a fresh process. The search doubles the batch until a probe exceeds the budget, then bisects
between the last batch that fit and the first that did not. It assumes the peak does not fall as the batch
grows (true of every graph here: activations scale with the batch, weights do not).
"""
from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import OnnxcompError
from .session import RuntimeSettings

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gib": 1 << 30}
FIGURES = ("peak", "growth")  # measure's peak_bytes (step over pre-step RSS) / growth_bytes (over set-up RSS)


def parse_size(text: str) -> int:
    """Bytes from "512MiB", "2GiB", "500MB" or a plain integer; OnnxcompError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or float(m.group(1)) <= 0:
        raise OnnxcompError(f"{text!r}: not a memory size; use e.g. 512MiB, 2GiB or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass
class Probe:
    batch: int
    bytes: int          # the figure compared with the budget
    fits: bool
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class Search:
    max_batch: int      # 0: not even the smallest batch fits
    probes: list[Probe]
    hit_limit: bool     # the largest allowed batch fit: the true maximum may be larger

    @property
    def first_over(self) -> int | None:
        """The smallest probed batch over the budget (the true maximum lies below it)."""
        return min((p.batch for p in self.probes if not p.fits), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {"max_batch": self.max_batch, "first_over": self.first_over, "hit_limit": self.hit_limit,
                "probes": [asdict(p) for p in self.probes]}


def _figure(probe: Probe) -> int | None:
    """A probe's bytes where they measure something: a measured peak, or for a batch the planner could not
    plan, its best reachable predicted peak (``extras["reachable_bytes"]``); None where neither is known."""
    if probe.extras.get("planned") is False:
        return probe.extras.get("reachable_bytes")
    return probe.bytes


def _interpolated(good: Probe, bad: Probe, budget: int) -> int | None:
    """The batch where the straight line through the two probes' figures meets the budget (None without
    two figures that rise with the batch)."""
    fg, fb = _figure(good), _figure(bad)
    if fg is None or fb is None or fb <= fg:
        return None
    return good.batch + int((budget - fg) * (bad.batch - good.batch) / (fb - fg))


def search_max_batch(measure_batch: Callable[[int], tuple[int, dict[str, Any]]], budget: int, *,
                     start: int = 1, limit: int = 4096, tolerance: float = 0.0, interpolate: bool = True) -> Search:
    """Largest batch in [start, limit] with ``measure_batch(batch)[0] <= budget``: doubling, then bisection.

    ``interpolate``: the next batch inside the bracket is where the line through the bracket's two figures
    meets the budget (peaks grow about linearly with the batch), with a bisection step whenever two steps
    in a row moved the same end; the answer is the same as bisection's, found in fewer probes (each one
    minutes at large batches).

    ``measure_batch`` returns (bytes, extras) for a batch; every batch is measured at most once.
    ``tolerance``: stop bisecting once the gap between the largest fitting and the smallest failing batch is
    at most this fraction of the fitting one (0: down to one sample). At batches in the thousands each probe
    is minutes; 2 % halves their number. The result is then a lower bound within that fraction."""
    if not 1 <= start <= limit:
        raise OnnxcompError(f"maxbatch: need 1 <= start <= limit (got start {start}, limit {limit})")
    if not 0 <= tolerance < 1:
        raise OnnxcompError(f"maxbatch: tolerance must be in [0, 1) (got {tolerance}); e.g. 0.02 for 2 %")
    probes: dict[int, Probe] = {}

    def fits(batch: int) -> bool:
        if batch not in probes:
            nbytes, extras = measure_batch(batch)
            probes[batch] = Probe(batch, int(nbytes), int(nbytes) <= budget, extras)
        return probes[batch].fits

    if not fits(start):
        return Search(0, list(probes.values()), False)
    good, bad = start, None
    while bad is None:  # doubling
        nxt = min(2 * good, limit)
        if nxt == good:
            return Search(good, sorted(probes.values(), key=lambda p: p.batch), True)
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    moved: list[bool] = []   # which end each step moved (True: the fitting one)
    while bad - good > max(1, int(tolerance * good)):  # bisection: good fits, bad does not
        mid = (good + bad) // 2
        guess = _interpolated(probes[good], probes[bad], budget) if interpolate else None
        # A line through a curved figure keeps landing on one side (regula falsi): after two steps that
        # moved the same end, one bisection step.
        if guess is not None and not (len(moved) >= 2 and moved[-1] == moved[-2]):
            mid = min(max(guess, good + 1), bad - 1)
        if fits(mid):
            good = mid
        else:
            bad = mid
        moved.append(good == mid)
    return Search(good, sorted(probes.values(), key=lambda p: p.batch), False)


AUTO_POLICIES = {"auto": False, "auto-exact": True}   # the budget planner; value: exact techniques only


def max_batch(model: str, image: int, budget: int, policies: list[str], *, classes: int = 10, steps: int = 2,
              settings: RuntimeSettings | None = None, figure: str = "peak", start: int = 1, limit: int = 4096,
              work_dir: str | Path | None = None, progress: Callable[[str], None] | None = None,
              tolerance: float = 0.0, starts: dict[str, int] | None = None,
              reuse: dict[str, Any] | None = None) -> dict[str, Any]:
    """Max batch within ``budget`` for the baseline and each policy ("baseline" needs no listing), measured.
    Policy "auto" is the budget planner planned at each probed batch for ``budget`` itself, "auto-exact" the
    same with bit-identical techniques only (`transform --policy auto --exact`); their probes also carry the
    plan's predicted peak and step time beside the measured ones.

    Artifacts per batch are generated once (in ``work_dir``, a temporary directory by default) and shared
    by every policy's search; so are plans (per budget) and budgets a plan could not meet. ``starts``: the
    first batch per policy (default ``start``). ``reuse``: an earlier result of this function (its JSON) whose
    searches are taken as they are (e.g. the baseline's, long at large batches) where it was measured the same
    way; another model, budget, figure, steps or settings is an error."""
    from ..models.artifacts import generate_artifacts
    from ..models.zoo import canonical_name
    from ..planner.auto import BudgetError
    from ..transform import transform
    from .measure import measure

    if figure not in FIGURES:
        raise OnnxcompError(f"maxbatch: unknown figure {figure!r}; use one of {', '.join(FIGURES)}")
    name = canonical_name(model)
    settings = settings or RuntimeSettings()
    policies = ["baseline", *[p for p in policies if p != "baseline"]]
    key = "peak_bytes" if figure == "peak" else "growth_bytes"
    tmp = tempfile.TemporaryDirectory(prefix="onnxcomp-maxbatch-") if work_dir is None else None
    work = Path(tmp.name if tmp else work_dir)
    work.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    try:
        def artifacts(batch: int) -> Path:
            art = work / f"{name}_b{batch}_{image}px"
            if not (art / "training_model.onnx").exists():
                generate_artifacts(name, batch, image, classes, art, smoke_test=False, overwrite=True)
            return art

        searches = {}
        for policy, found in _reusable(reuse, name, image, classes, budget, figure, steps, settings).items():
            if policy in policies:
                searches[policy] = found
        for policy in [p for p in policies if p not in searches]:
            def probe(batch: int, policy: str = policy) -> tuple[int, dict[str, Any]]:
                art = artifacts(batch)
                graph, run_dir = None, art
                planned: dict[str, Any] = {}
                if policy in AUTO_POLICIES:
                    # The budget planner at this batch, for this budget (a plan may split weights: its own
                    # artifact directory). A batch it cannot plan within the budget does not fit.
                    run_dir = art / f"{policy}-{budget}B"
                    failed = run_dir.with_name(run_dir.name + ".budget-error.json")
                    if failed.exists():
                        extras = json.loads(failed.read_text())
                        say(f"{policy}: batch {batch}: no plan within the budget (cached: {extras['error']})")
                        return budget + 1, extras
                    if not (run_dir / "training_model.onnx").exists():
                        t0 = time.perf_counter()
                        try:
                            transform(art, run_dir, "auto", budget_bytes=budget, exact=AUTO_POLICIES[policy],
                                      force=True)
                        except BudgetError as exc:
                            extras = {"planned": False, "error": str(exc),
                                      "planning_s": round(time.perf_counter() - t0, 1), **_reachable(exc, budget)}
                            failed.write_text(json.dumps(extras) + "\n")
                            say(f"{policy}: batch {batch}: no plan within the budget ({exc})")
                            return budget + 1, extras
                        planned["planning_s"] = round(time.perf_counter() - t0, 1)
                    planned.update(_plan_figures(run_dir / "training_model.plan.json"))
                elif policy != "baseline":
                    graph = art / f"{policy}.onnx"
                    if not graph.exists():
                        transform(art, graph, policy)
                m = measure(run_dir, model=graph, steps=steps, settings=settings)
                say(f"{policy}: batch {batch}: {figure} {getattr(m, key) / 2**20:.1f} MiB "
                    f"({'fits' if getattr(m, key) <= budget else 'over'} {budget / 2**20:.0f} MiB)")
                return getattr(m, key), {"peak_bytes": m.peak_bytes, "growth_bytes": m.growth_bytes,
                                         "step_time_s": m.step_time_s, **planned}

            searches[policy] = search_max_batch(probe, budget, start=(starts or {}).get(policy, start),
                                                limit=limit, tolerance=tolerance)
    finally:
        if tmp is not None:
            tmp.cleanup()
    base = searches["baseline"].max_batch
    return {"model": name, "image": image, "classes": classes, "budget_bytes": budget, "figure": figure,
            "settings": settings.to_dict(), "steps": steps, "tolerance": tolerance,
            "results": {p: {**s.to_dict(), "vs_baseline": (s.max_batch / base) if base else None}
                        for p, s in searches.items()}}


def _plan_figures(plan_path: Path) -> dict[str, Any]:
    """What the budget planner predicted for a probe (its plan file beside the graph): peak and step time."""
    try:
        auto = json.loads(plan_path.read_text()).get("auto") or {}
    except (OSError, ValueError):
        return {}
    detail = auto.get("detail", auto)
    step = detail.get("predicted_step_seconds") or {}
    return {"planned": True, "predicted_peak_bytes": detail.get("predicted_peak_bytes"),
            "target_bytes": detail.get("target_bytes"), "predicted_step_s": step.get("plan"),
            "predicted_baseline_step_s": step.get("baseline")}


def _reusable(reuse: dict[str, Any] | None, model: str, image: int, classes: int, budget: int, figure: str,
              steps: int, settings: RuntimeSettings) -> dict[str, Search]:
    """The searches of an earlier ``max_batch`` result, checked to be measured as this one would be."""
    if not reuse:
        return {}
    want = {"model": model, "image": image, "classes": classes, "budget_bytes": budget, "figure": figure,
            "steps": steps, "settings": settings.to_dict()}
    reuse = dict(reuse)
    if isinstance(reuse.get("settings"), dict):   # a setting an older result does not list had its default then
        reuse["settings"] = RuntimeSettings.from_dict(reuse["settings"]).to_dict()
    differ = [k for k, v in want.items() if reuse.get(k) != v]
    if differ:
        raise OnnxcompError(f"maxbatch: the earlier result was measured with other {', '.join(differ)} "
                            f"({', '.join(f'{k}={reuse.get(k)!r}' for k in differ)}); reuse one measured the same way")
    return {p: Search(r["max_batch"], [Probe(**q) for q in r["probes"]], r["hit_limit"])
            for p, r in (reuse.get("results") or {}).items()}


def _reachable(exc: Any, budget: int) -> dict[str, int]:
    """A failed plan's best reachable predicted peak, and that figure scaled to what a measurement compares
    with the budget (a plan has to predict the target, the budget less the predictor's margin); empty where
    the planner did not say."""
    peak, target = getattr(exc, "predicted_peak", None), getattr(exc, "target", None)
    if not peak or not target:
        return {}
    return {"predicted_peak_bytes": int(peak), "reachable_bytes": int(peak * budget / target)}
