"""`--policy auto --budget SIZE --budget-for ort-defaults`: a budget on what the graph costs under ORT's default
session settings (arena, memory pattern, reuse, DEFAULT order) — the process's growth over set-up that
`onnxcomp measure --arena --mem-pattern --mem-reuse --order default` reports — instead of the training step's
peak under onnxcomp's own settings.

The step-peak planner (planner/auto.py) is kept as it is and driven: its internal step-peak budget is searched
from the top (a budget nothing needs, then each time a step peak ``STEP_FACTOR`` times the last plan's) down
to the lowest step peak it reaches; each plan is finished as `transform` would write it (the last
passes, the gradient buffers' parameter order) and its growth predicted (planner/ort_growth.py). The first plan
from the top whose predicted growth is within the budget less ``GROWTH_MARGIN`` is taken: a looser step target
never costs more predicted seconds than a tighter one (the planner spends its cheapest options first), so the
first that fits is the cheapest found. Growth is not monotone in the step target (a tighter plan can hold ORT's
pattern block twice, or add nodes and PyOp copies), which is why every target is priced, not bisected. None fits:
``BudgetError`` naming the lowest predicted growth and its parts.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import onnx

from ..errors import OnnxcompError
from .auto import MiB, AutoPlan, BudgetError, plan_auto, tightest_budget_for

# Planned to a little under the growth budget: the predictor's error on the suite's graphs (docs/notes/growthplan.md:
# within ±5 % on 16 of 18 graphs).
GROWTH_MARGIN = 0.05
# Where a measurement follows the plan (`transform --verify`, `maxbatch`'s growth-mode probes), a plan that measures
# over the budget is planned again lower by the measured miss (planner/budget_verify.py): the margin then only
# trades a re-plan against a looser plan, it no longer guards the budget. Planned to 2 % under the budget there: the
# model's typical error (docs/notes/growthplan.md; ResNet-18 at 64x64 it over-predicts by 2.3 % at batch 234-240 and
# 3.5 % at 468, docs/notes/maxbatch8.md), where 5 % refused ResNet-18's b1872 plan predicting 499.9 MiB for 512
# (target 486.4). A plan the model under-predicts by more than 2 % costs one re-plan instead of being written.
VERIFIED_GROWTH_MARGIN = 0.02
# Step between the step-peak targets priced (a ratio of the previous target).
STEP_FACTOR = 0.85
MAX_CANDIDATES = 12
BUDGET_FOR = ("step-peak", "ort-defaults", "ort-defaults-total")
# The modes this module plans for. "ort-defaults": the growth over set-up (with what spacers hold at set-up, which
# only moves bytes into the set-up); "ort-defaults-total": the growth plus every byte of set-up the plan adds over
# the untouched graph's (its spacers and ``ort_growth.SET_UP_NODE_BYTES`` per added node): what a user pays, since
# a process holds its set-up and its growth (docs/notes/setupfree.md).
GROWTH_MODES = ("ort-defaults", "ort-defaults-total")


def objective_key(budget_for: str | None) -> str:
    """The key of a candidate's priced dict (``_growth_of``) that ``budget_for``'s budget limits."""
    return "total_bytes" if budget_for == "ort-defaults-total" else "growth_bytes"


def default_pyops(budget_for: str) -> bool | None:
    """``plan_for_growth``'s ``pyops`` for a CLI growth mode: None, i.e. where the first descent finds no plan within
    the budget (or prices every target, as `inspect`'s tightest-budget scan does) and a priced plan holds codec
    PyOps, a second descent without them. A PyOp plan's bridge copies and codec tables sit on the heap beside the
    arena and its codec modules add set-up: lossy squeezenet_s's tightest plan 7.25 MiB (2.29x) with PyOps, 6.15-6.24
    MiB (2.66x) without (stop 39, docs/auto/stop39/); densenet_s exact's native floor 51.4 against 56.6 MiB
    (docs/notes/setupfree.md). A budget the first descent meets costs nothing more; a failing search ~2x the time."""
    return None if budget_for in GROWTH_MODES else True


def _figure(g: dict[str, Any], key: str) -> int:
    return _total(g) if key == "total_bytes" else int(g[key])


def growth_target(budget: int, margin: float = GROWTH_MARGIN) -> int:
    """What a plan's predicted growth must be for ``budget``."""
    return int(budget * (1 - margin))


def check_margin(margin: float) -> float:
    """``margin`` (a share of the budget a plan is planned under it) if usable: 0 <= margin < 1."""
    if not 0.0 <= float(margin) < 1.0:
        raise OnnxcompError(f"margin {margin}: give a share of the budget in [0, 1), e.g. 0.02 (2 %)",
                            options=("margin",))
    return float(margin)


# Slack on the tightest budget `inspect` reports: a few bytes of the growth prediction (codec tables measured in a
# child process, ORT's optimised graph) can differ between the inspecting and the transforming process, and a
# budget exactly at the edge was then refused by `transform` (lossy densenet_s / leaky_vgg,
# docs/notes/budgetguard.md §2).
TIGHTEST_SLACK = 64 * 1024


def tightest_growth_budget(predicted_growth: int, margin: float = GROWTH_MARGIN) -> int:
    """The smallest growth budget a plan predicting ``predicted_growth`` is reported as accepted for: the exact edge
    plus ``TIGHTEST_SLACK`` so the figure survives a re-plan in another process."""
    return int(predicted_growth / (1 - margin)) + TIGHTEST_SLACK


def finished_graph(plan: AutoPlan, scratch_limit: int | None = None,
                   scratch_exact: bool = False, cast_first: bool = False) -> onnx.ModelProto | None:
    """The graph `transform` writes for ``plan``: its pipeline's graph after transform's last passes; with
    ``scratch_limit``, then after ``scratch_passes(scratch_limit, scratch_exact)``; with ``cast_first``, then with
    its native fp16 encoders cast first (passes/fp16_cast_first.py). None where those change nothing, or where the
    plan rewrote nothing: transform runs none of them on an untouched graph."""
    import onnx_ir as ir

    from ..analysis.cached import adopt_snapshot, snapshot_of
    from ..passes.base import run_passes
    from ..transform import finish_graph

    assert plan.model is not None
    stages = planned_stages(scratch_limit, scratch_exact, cast_first)
    records = list(plan.applied.log.records) if plan.applied is not None else []
    loaded = ir.serde.deserialize_model(plan.model)
    adopt_snapshot(loaded, plan.model, checked=True)
    if plan.applied is not None and not plan.applied.log.modified_by:
        return None if stages else plan.model
    finished, last, _ = finish_graph(loaded, records)
    # After the last passes, as transform does: run before them (so that DefaultOrderPass and the reuse pass see
    # the new nodes) lossy densenet_s's bounded plan predicted 30.9 MiB and measured 49.8; after them it predicted
    # 35.5 and measured 33.7 (docs/notes/lossyfloor.md).
    for stage in stages:
        if not run_passes(finished, stage).records:
            return None
    return snapshot_of(finished)


def planned_stages(scratch_limit: int | None, scratch_exact: bool = False, cast_first: bool = False
                   ) -> list[list[Any]]:
    """The pass stages run after transform's last passes on a plan priced with these (its record's
    ``scratch_limit_bytes``, ``scratch_exact``, ``fp16_cast_first``), in order: ``scratch_passes``, then the native
    fp16 encoders cast first (passes/fp16_cast_first.py). `transform` writes what ``finished_graph`` priced."""
    stages = [scratch_passes(scratch_limit, scratch_exact)] if scratch_limit else []
    if cast_first:
        from ..passes.fp16_cast_first import Fp16CastFirstPass

        stages.append([Fp16CastFirstPass()])
    return stages


@dataclass
class Candidate:
    step_budget: int | None          # None: the untouched graph
    fits_step: bool
    predicted_peak: int
    predicted_seconds: float
    growth: dict[str, Any] | None    # ort_growth.GrowthPrediction.to_dict()
    pyops: bool = True               # planned with codec PyOps allowed (auto.Regions.pyops)

    def record(self) -> dict[str, Any]:
        return {"step_budget_bytes": self.step_budget, "step_plan_fits": self.fits_step, "pyops": self.pyops,
                "predicted_peak_bytes": self.predicted_peak, "predicted_seconds": round(self.predicted_seconds, 6),
                "predicted_growth_bytes": None if self.growth is None else self.growth["growth_bytes"],
                "predicted_total_bytes": None if self.growth is None else _total(self.growth),
                "growth_parts": self.growth}


def _total(g: dict[str, Any]) -> int:
    """A priced dict's growth + set-up added (its growth where it was priced without the set-up)."""
    return int(g.get("total_bytes", g["growth_bytes"]))


# Kernel scratch limits priced for lossy plans (``bounded_growth``): under ORT's defaults ConvGrad's one-image im2col
# buffer and ConvTranspose's col buffer are arena requests outside the pattern block — pages of their own
# (2.5-3.5 MiB on the suite's chunked lossy plans) or, where the set-up leaves no room for them, a second copy of
# the block (lossy densenet_s: 16 MiB). MLAS's segmented Conv buffer is 128 KiB; three limits above it are priced.
SCRATCH_LIMITS = (256 << 10, 512 << 10, 1 << 20)
# Bounded graphs are priced as they are. (Until stop 40 with every request outside the block doubled, a stopgap for
# two bounded lossy densenet_s plans that measured the block twice where the replay held it once; the cause was
# ConvGrad's bias row, asked whether or not dB is an output and counted by the replay only with dB:
# docs/notes/headroom.md.)
# For exact plans (``bounded_growth(exact=True)``): the limits priced are the largest request outside the block over
# these divisors, so the ConvGrad that sets it is halved / quartered; SCRATCH_LIMITS' fixed ones would ask for block
# counts that rarely probe bit-identical (passes/split_conv_grad.py ``exact_blocks``). Exact wide_resnet_s's plan with
# its largest ConvGrad in 2 blocks predicted 25.11 MiB and measured 25.25 (docs/notes/setupcount.md).
EXACT_SCRATCH_DIVISORS = (2, 4)


def scratch_passes(limit: int, exact: bool = False) -> list[Any]:
    """The passes that bound kernel scratch at ``limit`` bytes: every ConvGrad whose im2col buffer exceeds it run as
    input-channel blocks making dW, dX by one Conv over flipped weights where the conv has stride 1
    (passes/split_conv_grad.py ``dx_by_conv``), and every stride-1 ConvTranspose whose col buffer exceeds it run as
    a Conv (passes/conv_transpose_as_conv.py). Not bit-identical: lossy plans only. ``exact``: only ConvGrads split
    into input-channel blocks computing dX and dW, where the blocks probe bit-identical (``SplitConvGradPass(exact=
    True)``); the Conv over flipped weights and ConvTransposeAsConv sum in another order and are left out.
    `transform` runs them after its last passes where the plan's record names a limit (``scratch_limit_bytes``,
    ``scratch_exact``), as ``finished_graph`` does here."""
    from ..passes.conv_transpose_as_conv import ConvTransposeAsConvPass
    from ..passes.split_conv_grad import SplitConvGradPass

    if exact:
        return [SplitConvGradPass(limit, exact=True)]
    return [SplitConvGradPass(limit, dx_by_conv=True), ConvTransposeAsConvPass(limit)]


def bounded_growth(plan: AutoPlan, plain: dict[str, Any], base_nodes: int = 0,
                   key: str = "growth_bytes", exact: bool = False) -> dict[str, Any]:
    """``plain`` (the growth parts of ``plan``'s finished graph, ``scratch_limit_bytes`` None), or the parts of the
    graph finished with ``scratch_passes(L)`` for the ``SCRATCH_LIMITS`` entry L predicting the least ``key``
    (growth, or growth + set-up added) where that is less (``scratch_limit_bytes`` L). Only limits under the plain graph's largest request outside the pattern block are tried.
    ``exact``: the limits are that largest request over ``EXACT_SCRATCH_DIVISORS``, the passes the bit-identical
    ones (``scratch_passes(L, exact=True)``); ``scratch_exact`` records which.
    Lossy plans are then priced with their native fp16 encoders cast first (``fp16_cast_first``)."""
    best = {**plain, "scratch_limit_bytes": None, "scratch_exact": exact, "fp16_cast_first": False}
    largest = int(plain.get("largest_outside_bytes", 0))
    limits = sorted({largest // d for d in EXACT_SCRATCH_DIVISORS if largest // d > SCRATCH_LIMITS[0] // 2},
                    reverse=True) if exact else SCRATCH_LIMITS
    for limit in limits:
        if largest <= limit:
            continue
        graph = finished_graph(plan, limit, exact)
        if graph is None:
            continue
        p = _growth_of(graph, base_nodes)
        if _figure(p, key) < _figure(best, key):
            best = {**p, "scratch_limit_bytes": limit, "scratch_exact": exact, "fp16_cast_first": False}
    if exact:
        return best         # no fp16 encoders in an exact plan
    # Then the native fp16 encoders cast first (no float32 clip copy beside the stash; passes/fp16_cast_first.py),
    # on the best graph so far: not the default form, because the other buffer sizes can move ORT's best-fit
    # layout either way (lossy squeezenet_s's P 4.25 -> 3.87 MiB, leaky_vgg's 10.6 -> 11.8, docs/notes/lossyp.md).
    limit = best["scratch_limit_bytes"]
    graph = finished_graph(plan, limit, cast_first=True)
    if graph is not None:
        p = _growth_of(graph, base_nodes)
        if _figure(p, key) < _figure(best, key):
            best = {**p, "scratch_limit_bytes": limit, "scratch_exact": False, "fp16_cast_first": True}
    return best


def _growth_of(graph: onnx.ModelProto, base_nodes: int = 0) -> dict[str, Any]:
    """The growth prediction's parts, plus ``set_up_added_bytes`` (over an untouched graph of ``base_nodes``
    nodes) and ``total_bytes`` (growth + set-up added: ``--budget-for ort-defaults-total``'s figure)."""
    from .ort_growth import predict_growth_of, set_up_added_bytes

    # spacers (passes/arena_spacer.py) are priced too: transform adds them when it writes an artifact directory
    try:
        p = predict_growth_of(graph, reorder=True, spacers=True)
        added = set_up_added_bytes(p, base_nodes)
        # ``p.total`` holds the spacers' set-up already (ort_growth.with_spacers)
        return p.to_dict() | {"set_up_added_bytes": added, "total_bytes": p.total - p.spacer_set_up + added}
    except Exception as exc:  # noqa: BLE001  (ORT's set-up raises its own types): one line, not a traceback
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise OnnxcompError(
            f"{{budget_for}} ort-defaults: ORT could not set up a candidate graph to predict its growth ({first}); "
            "budget the step peak instead (the default) or check the graph with `onnxcomp inspect`",
            options=("budget_for",)) from exc


def plan_for_growth(model: onnx.ModelProto, budget: int, *, exact: bool = False, min_bytes: int = 64 * 1024,
                    margin: float = GROWTH_MARGIN, progress: Any = None, step_budgets: list[int] | None = None,
                    stop_at_first: bool = True, pyops: bool | None = True,
                    budget_for: str = "ort-defaults") -> AutoPlan:
    """The plan (from planner/auto.plan_auto at some step-peak budget) that fits the ORT-defaults growth
    ``budget`` at the least cost; ``plan.fits`` False and the lowest predicted growth when none does.
    ``step_budgets``: the step-peak budgets to price instead of the default descent (the untouched graph is
    always priced first). ``stop_at_first``: False prices every target (the tightest accepted budget).

    ``pyops``: True (default) — one descent, every option; False — one descent with options that run as ORT ops
    only (``auto.Regions.pyops``); None — the first, then, where no plan fits (or every target is priced) and a
    priced plan holds codec PyOps, the second: under ORT's defaults a codec PyOp's bridge copies and NumPy
    temporaries (and ~30 KB of small blocks each) come on top of the arena, which can outweigh what its payload
    saves against a native encoding. The CLI's growth modes use None (``default_pyops``); on ResNet-18 (10 classes,
    64x64) the native descent priced no plan below the floor of the first and doubles a failing search's time
    (docs/notes/r18lossy10.md).

    ``budget_for``: "ort-defaults" (``budget`` limits the predicted growth) or "ort-defaults-total" (the predicted
    growth plus the set-up the plan adds, ``_growth_of``'s ``total_bytes``)."""
    from . import memo

    if budget <= 0:
        raise OnnxcompError(f"budget {budget} bytes: must be positive", options=("budget_bytes",))
    margin = check_margin(margin)
    if budget_for not in GROWTH_MODES:
        raise OnnxcompError(f"budget_for {budget_for!r}: the growth planner takes one of {', '.join(GROWTH_MODES)}",
                            options=("budget_for",))
    key = objective_key(budget_for)
    base_nodes = len(model.graph.node)
    say = progress or (lambda _m: None)
    target = growth_target(budget, margin)
    candidates: list[tuple[Candidate, AutoPlan]] = []
    with memo.planning_session() if not memo.active() else nullcontext():
        chosen: tuple[Candidate, AutoPlan] | None = None
        for native_only in ([False, True] if pyops is None else [not pyops]):
            if native_only and pyops is None:
                if chosen is not None and stop_at_first:
                    break
                if not any(c.growth is not None and (c.growth.get("pyops") or c.growth.get("heap_bytes"))
                           for c, _ in candidates):
                    break       # no priced plan held a PyOp: the same plans again
                say("auto (ORT defaults): again with options that run as ORT ops only (no codec PyOps)")
            found = _descend(model, target, exact, min_bytes, step_budgets, stop_at_first, not native_only,
                             candidates, say, first=not candidates, key=key, base_nodes=base_nodes)
            if chosen is None:
                chosen = found
    priced = [(c, p) for c, p in candidates if c.growth is not None]
    records = [c.record() for c, _ in candidates]
    if chosen is None:
        best_c, best_p = min(priced, key=lambda cp: _figure(cp[0].growth, key)) if priced else candidates[0]
        plan = _with_growth(best_p, budget, target, best_c, records, fits=False, budget_for=budget_for, margin=margin)
        return plan
    return _with_growth(chosen[1], budget, target, chosen[0], records, fits=True, budget_for=budget_for,
                        margin=margin)


def _descend(model: onnx.ModelProto, target: int, exact: bool, min_bytes: int, step_budgets: list[int] | None,
             stop_at_first: bool, pyops: bool, candidates: list[tuple["Candidate", AutoPlan]], say: Any,
             first: bool = True, key: str = "growth_bytes", base_nodes: int = 0
             ) -> tuple["Candidate", AutoPlan] | None:
    """One descent of step targets (the untouched graph first where ``first``), each plan priced and appended
    to ``candidates``; the first whose predicted ``key`` (growth, or growth + set-up added) is within ``target``,
    or None."""
    def price(step_budget: int | None) -> tuple[Candidate, AutoPlan]:
        plan = plan_auto(model, step_budget if step_budget is not None else 1 << 50, exact=exact,
                         min_bytes=min_bytes, pyops=pyops)
        growth = None
        if plan.fits:
            growth = bounded_growth(plan, _growth_of(finished_graph(plan), base_nodes), base_nodes, key, exact)
        c = Candidate(step_budget, plan.fits, plan.predicted_peak, plan.predicted_seconds, growth, pyops)
        candidates.append((c, plan))
        g = "—" if growth is None else f"{growth['growth_bytes'] / MiB:.1f} MiB" + (
            f" (+ set-up {growth.get('set_up_added_bytes', 0) / MiB:.1f} MiB)" if key == "total_bytes" else "")
        say(f"auto (ORT defaults): step target {'none' if step_budget is None else f'{step_budget / MiB:.1f} MiB'}"
            f"{'' if pyops else ' (no PyOps)'}: step peak {plan.predicted_peak / MiB:.1f} MiB, predicted growth {g}"
            f" (target {target / MiB:.1f} MiB)")
        return c, plan

    def within(c: Candidate) -> bool:
        return c.fits_step and c.growth is not None and _figure(c.growth, key) <= target

    chosen: tuple[Candidate, AutoPlan] | None = None
    if first:
        c0, untouched = price(None)
        if within(c0):
            chosen = (c0, untouched)
        last_peak = untouched.predicted_peak
    else:
        last_peak = next(p.predicted_peak for c, p in candidates if c.step_budget is None)
    fixed = list(step_budgets) if step_budgets is not None else None
    for _ in range(MAX_CANDIDATES):
        if chosen is not None and stop_at_first:
            break
        if fixed is not None:
            if not fixed:
                break
            b = fixed.pop(0)
        else:
            # Each target asks for a step peak STEP_FACTOR under the last plan's, so each candidate differs.
            b = tightest_budget_for(int(last_peak * STEP_FACTOR))
        c, plan = price(b)
        if not c.fits_step:
            # Below the planner's floor: its lowest reachable peak, priced at the budget it is accepted for.
            for k in range(3):
                b = int(tightest_budget_for(plan.predicted_peak) * (1 + 0.02 * k)) + 1
                c, plan = price(b)
                if c.fits_step:
                    break
            if within(c) and chosen is None:
                chosen = (c, plan)
            break
        if within(c) and chosen is None:
            chosen = (c, plan)
        if plan.predicted_peak >= last_peak:
            break        # the planner cannot go lower from here
        last_peak = plan.predicted_peak
    return chosen


def _predicted_key(budget_for: str | None) -> str:
    """The plan record's predicted figure that a ``budget_for`` budget is checked against."""
    return f"predicted_{objective_key(budget_for)}"


def _with_growth(plan: AutoPlan, budget: int, target: int, c: Candidate, records: list[dict[str, Any]],
                 fits: bool, budget_for: str = "ort-defaults", margin: float = GROWTH_MARGIN) -> AutoPlan:
    from dataclasses import replace

    rkey = _predicted_key(budget_for)
    growth = {"budget_for": budget_for, "growth_budget_bytes": budget, "growth_target_bytes": target,
              "margin": margin,
              "predicted_growth_bytes": None if c.growth is None else c.growth["growth_bytes"],
              "predicted_set_up_added_bytes": None if c.growth is None else c.growth.get("set_up_added_bytes", 0),
              "predicted_total_bytes": None if c.growth is None else _total(c.growth),
              "step_budget_bytes": c.step_budget, "parts": c.growth, "candidates": records,
              "spacers": (c.growth or {}).get("spacers") or [],
              "scratch_limit_bytes": (c.growth or {}).get("scratch_limit_bytes"),
              "scratch_exact": bool((c.growth or {}).get("scratch_exact")),
              "fp16_cast_first": bool((c.growth or {}).get("fp16_cast_first")),
              # in either mode: the smallest budget of that mode's figure a priced plan is accepted for, at this
              # plan's margin, and at the margin `transform --verify` plans with (a measurement follows)
              "tightest_growth_budget_bytes": min((tightest_growth_budget(r[rkey], margin)
                                                   for r in records if r[rkey] is not None), default=None),
              "tightest_verified_growth_budget_bytes": min((tightest_growth_budget(r[rkey], VERIFIED_GROWTH_MARGIN)
                                                            for r in records if r[rkey] is not None), default=None)}
    return replace(plan, fits=fits, growth=growth)


def growth_failure_line(plan: AutoPlan) -> str:
    g = plan.growth or {}
    mode = "exact techniques only (--exact)" if plan.exact else "every technique"
    parts = g.get("parts") or {}
    total = g.get("budget_for") == "ort-defaults-total"
    best = g.get(_predicted_key(g.get("budget_for")))
    what = "growth + set-up added" if total else "growth"
    if best is None:
        return (f"ORT-defaults {what} budget {g.get('growth_budget_bytes', 0) / MiB:.1f} MiB cannot be met with "
                f"{mode}: no plan could be priced")
    added = (f", set-up added {g.get('predicted_set_up_added_bytes', 0) / MiB:.1f} MiB" if total else "")
    return (f"ORT-defaults {what} budget {g['growth_budget_bytes'] / MiB:.1f} MiB cannot be met with {mode}: the "
            f"lowest predicted {what} over {len(g['candidates'])} plan(s) is {best / MiB:.1f} MiB (a plan must predict "
            f"≤ {g['growth_target_bytes'] / MiB:.1f} MiB), made of ORT's pattern block {parts.get('pattern_bytes', 0) / MiB:.1f}"
            f" MiB held {parts.get('pattern_copies', 1)}×, arena {parts.get('arena_bytes', 0) / MiB:.1f} MiB, nodes "
            f"{parts.get('node_bytes', 0) / MiB:.1f} MiB, PyOp copies {parts.get('heap_bytes', 0) / MiB:.1f} MiB{added}; the "
            f"tightest budget it accepts is {g['tightest_growth_budget_bytes'] / MiB:.1f} MiB")


def raise_if_unfit(plan: AutoPlan) -> None:
    if not plan.fits:
        g = plan.growth or {}
        raise BudgetError(growth_failure_line(plan), predicted_peak=g.get(_predicted_key(g.get("budget_for"))),
                          target=g.get("growth_target_bytes"))
