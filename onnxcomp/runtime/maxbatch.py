"""`onnxcomp maxbatch`: the largest batch whose *measured* training-step peak fits a memory budget.

GACT's protocol (its benchmark's max-batch search), with measured peaks instead of an allocator's failure:
for each probed batch, export the model, generate ORT training artifacts, apply the policy and run
``measure`` in a fresh process. The search doubles the batch until a probe exceeds the budget, then bisects
between the last batch that fit and the first that did not. It assumes the peak does not fall as the batch
grows (true of every graph here: activations scale with the batch, weights do not).
"""
from __future__ import annotations

import json
import os
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
# Under ORT's arena or memory pattern the first runs differ in kind: the first run sets the pattern block and
# the arena's regions up, and the next can move the block into a second region and keep both resident
# ("2P", docs/notes/suitedef3.md: 27.9 MiB growth in run 1, 45.4 from run 2 on). A probe needs this many runs
# (warm-up included) so that its figure comes from the second run on and shows whether it repeats.
PATTERN_RUNS = 3
_MiB = 1 << 20


def default_figure(settings: RuntimeSettings) -> str:
    """The figure to compare with a budget under ``settings``: growth over set-up with ORT's arena on (the
    arena keeps the previous step's memory, so a step's peak over its pre-step RSS reads ~0), the step
    peak otherwise."""
    return "growth" if settings.arena else "peak"


def is_ort_defaults(settings: RuntimeSettings) -> bool:
    """Are ``settings`` ORT's default session settings (arena, memory pattern, buffer reuse, DEFAULT order)? The
    growth-mode planner (planner/growth_budget.py) predicts the growth over set-up under exactly these."""
    return settings.arena and settings.mem_pattern and settings.mem_reuse and settings.execution_order == "default"


def default_budget_for(settings: RuntimeSettings, figure: str) -> str:
    """What an auto probe's plan is budgeted for: the growth under ORT's defaults where the probe measures that
    (`transform --budget-for ort-defaults`), the step peak under onnxcomp's settings otherwise."""
    return "ort-defaults" if figure == "growth" and is_ort_defaults(settings) else "step-peak"


def check_measurement(settings: RuntimeSettings, figure: str, steps: int, warmup: int = 1) -> None:
    """Refuse a figure or a step count that under-reports under ``settings`` (OnnxcompError)."""
    if figure not in FIGURES:
        raise OnnxcompError(f"maxbatch: unknown figure {figure!r}; use one of {', '.join(FIGURES)}")
    if settings.arena and figure == "peak":
        raise OnnxcompError("maxbatch: with ORT's arena on, a step's peak over its pre-step RSS reads ~0 (the "
                            "arena holds the previous step's memory); compare the growth over set-up "
                            "(--figure growth, the default under --arena)")
    if (settings.arena or settings.mem_pattern) and warmup + steps < PATTERN_RUNS:
        raise OnnxcompError(f"maxbatch: with ORT's arena or memory pattern on, a probe needs {PATTERN_RUNS} runs "
                            f"(warm-up included; got {warmup} + {steps}): the arena can move the pattern "
                            f"block into a new region after the first run; use --steps {PATTERN_RUNS - warmup} "
                            "or more")


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
              settings: RuntimeSettings | None = None, figure: str | None = None, start: int = 1,
              limit: int = 4096, work_dir: str | Path | None = None,
              progress: Callable[[str], None] | None = None, tolerance: float = 0.0,
              starts: dict[str, int] | None = None, reuse: dict[str, Any] | None = None,
              replans: int = 2, plan_fraction: float = 1.0, budget_for: str | None = None,
              margin: float | None = None) -> dict[str, Any]:
    """Max batch within ``budget`` for the baseline and each policy ("baseline" needs no listing), measured.
    Policy "auto" is the budget planner planned at each probed batch for ``budget`` itself, "auto-exact" the
    same with bit-identical techniques only (`transform --policy auto --exact`); their probes also carry the
    plan's predicted peak and step time beside the measured ones.

    Artifacts per batch are generated once (in ``work_dir``, a temporary directory by default) and shared
    by every policy's search; so are plans (per budget) and budgets a plan could not meet. ``starts``: the
    first batch per policy (default ``start``). ``reuse``: an earlier result of this function (its JSON) whose
    searches are taken as they are (e.g. the baseline's, long at large batches) where it was measured the same
    way; another model, budget, figure, steps or settings is an error.

    ``figure``: what is compared with the budget (default: ``default_figure(settings)``). The planner predicts
    a step's peak under measure's own settings; under others (ORT's defaults: arena, memory pattern) the
    measured figure can be far above its prediction, so a plan for ``budget`` itself need not fit. An auto
    probe therefore plans for a *planning budget*: ``plan_fraction`` x ``budget`` at first, then as the
    earlier probes of the policy measured (the last measured plan's planning budget x budget / its figure,
    less 2 %), and when a plan measures over ``budget`` it is planned again for a proportionally lower
    planning budget, at most ``replans`` times. Every attempt is recorded in the probe (``attempts``).

    ``budget_for``: what an auto probe's plan is budgeted for — "ort-defaults" (`transform --budget-for
    ort-defaults`: the planner predicts the growth under ORT's defaults, planner/growth_budget.py) or
    "step-peak" (the step peak under onnxcomp's settings, with the planning budget above). Default
    (``default_budget_for``): "ort-defaults" where the probe measures the growth under exactly ORT's defaults.
    There the planning budget starts at the budget itself (the prediction is of the measured figure) and a plan
    measured over it is planned again as `transform --verify` does: for an internal budget lowered by the miss
    plus 1 % of the budget (planner/budget_verify.next_internal_budget); a plan that fit keeps the next probe's
    internal budget where it was (``_next_growth_fraction``).

    ``margin``: the share of the planning budget an auto plan is planned under it (`transform --margin`). Default:
    in growth mode ``growth_budget.VERIFIED_GROWTH_MARGIN`` (each probe measures its plan and re-plans one that is
    over, as `transform --verify` does), else the step-peak planner's own (planner/auto.DEFAULT_MARGIN)."""
    from ..models.artifacts import generate_artifacts
    from ..models.zoo import canonical_name
    from ..planner.auto import BudgetError
    from ..transform import transform
    from .measure import measure

    settings = settings or RuntimeSettings()
    figure = figure or default_figure(settings)
    check_measurement(settings, figure, steps)
    if not 0 < plan_fraction <= 1 or replans < 0:
        raise OnnxcompError(f"maxbatch: need 0 < plan fraction <= 1 and replans >= 0 (got {plan_fraction}, "
                            f"{replans})")
    budget_for = budget_for or default_budget_for(settings, figure)
    if budget_for not in ("step-peak", "ort-defaults"):     # a probe measures growth or the step peak, not set-up
        raise OnnxcompError(f"maxbatch: budget_for {budget_for!r}: use step-peak or ort-defaults")
    growth_mode = budget_for == "ort-defaults"
    from ..planner.growth_budget import GROWTH_MARGIN, VERIFIED_GROWTH_MARGIN, check_margin

    if margin is None and growth_mode:
        margin = VERIFIED_GROWTH_MARGIN
    margin = None if margin is None else check_margin(margin)
    # plans (and budgets found unreachable) for another margin are other plans: kept apart in the work dir
    default_margin = GROWTH_MARGIN if growth_mode else None
    margin_tag = "" if margin is None or margin == default_margin else f"-m{margin:g}"
    if growth_mode and not (figure == "growth" and is_ort_defaults(settings)):
        raise OnnxcompError("maxbatch: --budget-for ort-defaults plans for the growth under ORT's default settings; "
                            "measure it that way: --arena --mem-pattern --mem-reuse --order default (figure growth)")
    name = canonical_name(model)
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
            # The planning budget's fraction of ``budget`` that the policy's last measured plan implies.
            learned = {"fraction": plan_fraction}

            def measured(run_dir: Path, graph: Path | None) -> dict[str, Any]:
                t0 = time.perf_counter()
                m = measure(run_dir, model=graph, steps=steps, settings=settings)
                return {"bytes": int(getattr(m, key)), "peak_bytes": m.peak_bytes, "growth_bytes": m.growth_bytes,
                        "step_time_s": m.step_time_s, "measure_s": round(time.perf_counter() - t0, 1),
                        "load": [round(x, 2) for x in os.getloadavg()],
                        **{k: m.extras[k] for k in _PER_STEP if k in (getattr(m, "extras", None) or {})}}

            def plan(art: Path, batch: int, planned_budget: int, policy: str) -> tuple[Path | None, dict[str, Any]]:
                """The plan for ``planned_budget`` at this batch (kept per planning budget in the work dir, and
                so are budgets the planner could not meet): its directory, or None and why."""
                # growth-mode plans are kept apart from step-peak plans of the same budget
                run_dir = art / f"{policy}{'-growth' if growth_mode else ''}{margin_tag}-{planned_budget}B"
                failed = run_dir.with_name(run_dir.name + ".budget-error.json")
                info: dict[str, Any] = {"planned_budget_bytes": planned_budget}
                if failed.exists():
                    info.update(json.loads(failed.read_text()))
                    say(f"{policy}: batch {batch}: no plan within {planned_budget / _MiB:.1f} MiB (cached: "
                        f"{info['error']})")
                    return None, info
                if not (run_dir / "training_model.onnx").exists():
                    t0 = time.perf_counter()
                    try:
                        transform(art, run_dir, "auto", budget_bytes=planned_budget, exact=AUTO_POLICIES[policy],
                                  force=True, **({"budget_for": "ort-defaults"} if growth_mode else {}),
                                  **({} if margin is None else {"margin": margin}))
                    except BudgetError as exc:
                        # its best reachable peak, scaled to the measured budget, as the probe's figure
                        info.update({"planned": False, "error": str(exc),
                                     "planning_s": round(time.perf_counter() - t0, 1), **_reachable(exc, budget)})
                        failed.write_text(json.dumps(info) + "\n")
                        say(f"{policy}: batch {batch}: no plan within {planned_budget / _MiB:.1f} MiB ({exc})")
                        return None, info
                    info["planning_s"] = round(time.perf_counter() - t0, 1)
                info.update(_plan_figures(run_dir / "training_model.plan.json"))
                return run_dir, info

            def probe(batch: int, policy: str = policy, learned: dict[str, float] = learned) -> tuple[int, dict[str, Any]]:
                art = artifacts(batch)
                if policy not in AUTO_POLICIES:
                    graph = None
                    if policy != "baseline":
                        graph = art / f"{policy}.onnx"
                        if not graph.exists():
                            transform(art, graph, policy)
                    got = measured(art, graph)
                    say(f"{policy}: batch {batch}: {figure} {got['bytes'] / _MiB:.1f} MiB "
                        f"({'fits' if got['bytes'] <= budget else 'over'} {budget / _MiB:.0f} MiB)")
                    return got.pop("bytes"), got
                # The budget planner at this batch. A batch it cannot plan within the planning budget does
                # not fit; a plan measured over the budget is planned again for less.
                attempts: list[dict[str, Any]] = []
                planned_budget = _planning_budget(budget, learned["fraction"])
                while True:
                    run_dir, info = plan(art, batch, planned_budget, policy)
                    if run_dir is None:
                        attempts.append(info)
                        break
                    got = measured(run_dir, None)
                    info.update(got)
                    attempts.append(info)
                    say(f"{policy}: batch {batch}: planned for {planned_budget / _MiB:.1f} MiB, {figure} "
                        f"{got['bytes'] / _MiB:.1f} MiB ({'fits' if got['bytes'] <= budget else 'over'} "
                        f"{budget / _MiB:.0f} MiB)")
                    if growth_mode:     # the growth model's miss is mostly additive (budget_verify.py)
                        learned["fraction"] = _next_growth_fraction(planned_budget, got["bytes"], budget)
                    else:
                        learned["fraction"] = min(1.0, planned_budget * _AIM / got["bytes"])
                    lower = _planning_budget(budget, learned["fraction"])
                    if got["bytes"] <= budget or len(attempts) > replans or lower >= planned_budget:
                        break
                    planned_budget = lower
                last = attempts[-1]
                fitting = [a for a in attempts if a.get("bytes") is not None and a["bytes"] <= budget]
                best = fitting[-1] if fitting else last
                extras = {k: v for k, v in best.items() if k != "bytes"}
                extras["attempts"] = attempts
                if best.get("bytes") is None:           # no plan at the last planning budget
                    return budget + 1, extras
                return best["bytes"], extras

            searches[policy] = search_max_batch(probe, budget, start=(starts or {}).get(policy, start),
                                                limit=limit, tolerance=tolerance)
    finally:
        if tmp is not None:
            tmp.cleanup()
    base = searches["baseline"].max_batch
    return {"model": name, "image": image, "classes": classes, "budget_bytes": budget, "figure": figure,
            "settings": settings.to_dict(), "steps": steps, "tolerance": tolerance, "budget_for": budget_for,
            "margin": margin,
            "results": {p: {**s.to_dict(), "vs_baseline": (s.max_batch / base) if base else None}
                        for p, s in searches.items()}}


# Aim a planning budget this far below the proportional estimate (a plan's figure is not exactly
# proportional to its planning budget).
_AIM = 0.98
_PER_STEP = ("peak_bytes_per_step", "growth_bytes_per_step", "warmup_peak_bytes", "step_times_s", "rss_setup_bytes",
             "process_peak_bytes")


def _next_growth_fraction(planned: int, measured: int, budget: int) -> float:
    """Growth mode: the next internal (planning) budget as a fraction of ``budget``. Over the budget: lowered
    by the miss plus 1 % of the budget (`transform --verify`'s rule); within it: kept, so that later probes start
    from the internal budget that fit. Not raised by what a fitting plan left unused: the growth planner plans to
    95 % of its budget, so a raise by the unused bytes overshoots and costs a re-plan at the next probe (one plan
    at ResNet-18 b1872 is ~10 min) — the search may stop up to the model's miss short of the true largest batch."""
    from ..planner.budget_verify import next_internal_budget

    if measured > budget:
        return max(0.0, next_internal_budget(planned, measured, budget) / budget)
    return min(1.0, planned / budget)


def _planning_budget(budget: int, fraction: float) -> int:
    """``fraction`` of ``budget``, rounded down to whole MiB above 1 MiB (so that probes share plans in the work
    dir); ``budget`` itself at fraction 1."""
    if fraction >= 1:
        return budget
    aimed = int(budget * fraction)
    return max(1, aimed - aimed % _MiB if aimed > _MiB else aimed)


def _plan_figures(plan_path: Path) -> dict[str, Any]:
    """What the budget planner predicted for a probe (its plan file beside the graph): peak and step time."""
    try:
        auto = json.loads(plan_path.read_text()).get("auto") or {}
    except (OSError, ValueError):
        return {}
    detail = auto.get("detail", auto)
    step = detail.get("predicted_step_seconds") or {}
    growth = detail.get("ort_defaults") or {}
    return {"planned": True, "predicted_peak_bytes": detail.get("predicted_peak_bytes"),
            **({"predicted_growth_bytes": growth.get("predicted_growth_bytes"),
                "step_budget_bytes": growth.get("step_budget_bytes")} if growth else {}),
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
