"""Plans without codec PyOps (auto.Regions.pyops / plan_auto(pyops=False)) and the growth mode's second descent
with them (planner/growth_budget.plan_for_growth): under ORT's defaults a codec PyOp's bridge copies come on top
of the arena, so where every plan with PyOps misses a growth budget, plans with native options only are priced."""
from __future__ import annotations

from typing import Any

import onnx
import pytest

from graphs import TWO_CONV, parse
from onnxcomp.planner import growth_budget
from onnxcomp.planner.auto import plan_auto
from onnxcomp.planner.ort_growth import CODEC_DOMAIN

MiB = 1 << 20
KiB = 1 << 10


def _big_two_conv() -> onnx.ModelProto:
    """TWO_CONV at batch 8, 32x32: each stash 128 KiB, above the encoders' 64 KiB floor."""
    return parse(TWO_CONV.replace("float[2,3,8,8] input", "float[8,3,32,32] input"))


def _pyops(model: onnx.ModelProto) -> int:
    return sum(1 for n in model.graph.node if n.domain == CODEC_DOMAIN)


def test_options_without_pyops_are_the_native_ones() -> None:
    from onnxcomp.planner import memo
    from onnxcomp.planner.auto import Regions, _Costs, _make_base, encoding_techniques

    model = _big_two_conv()
    with memo.planning_session():
        every = _make_base(model, Regions(), encoding_techniques(), _Costs(), False, 64 * KiB).options
        native = _make_base(model, Regions(pyops=False), encoding_techniques(), _Costs(), False, 64 * KiB).options
    every_opts = [o for v in every.values() for o in v]
    # The ReLU output feeding ConvGrad takes codec PyOps (zfp, fp8 DPR) and native fp16 / recomputation.
    assert any(not o.native for o in every_opts) and any(o.native for o in every_opts)
    assert {o.technique for o in every_opts if not o.native} >= {"zfp-8", "dpr-fp8"}
    assert "dpr-fp16" in {o.technique for o in every_opts if o.native}
    kept = [o for v in native.values() for o in v]
    assert kept and all(o.native for o in kept)
    assert set(kept) == {o for o in every_opts if o.native}


def test_a_plan_without_pyops_writes_no_codec_pyop() -> None:
    model = _big_two_conv()
    plan = plan_auto(model, 4 * KiB, pyops=False)
    assert plan.regions.pyops is False and plan.model is not None and _pyops(plan.model) == 0
    assert all(o.native for o in plan.chosen.values())


def _fake_pricing(monkeypatch: pytest.MonkeyPatch, original: onnx.ModelProto) -> None:
    """Growth by what was planned: untouched 50 MiB; a plan with codec PyOps allowed 20 MiB (their bridge copies);
    one with ORT ops only 10 MiB. (This little graph's plans hold no PyOp whatever is allowed: the pricing is
    what the descent is tested against, not the predictor.)"""
    base = len(original.graph.node)
    state = {"pyops": True}
    real = growth_budget.plan_auto

    def planner(*args: Any, **kw: Any) -> Any:
        state["pyops"] = kw.get("pyops", True)
        return real(*args, **kw)

    def growth(graph: onnx.ModelProto) -> dict[str, Any]:
        untouched = len(graph.graph.node) == base
        g = 50 * MiB if untouched else (20 * MiB if state["pyops"] else 10 * MiB)
        n = 0 if untouched or not state["pyops"] else 3
        return {"growth_bytes": g, "pyops": n, "heap_bytes": 4 * MiB if n else 0, "spacers": []}

    monkeypatch.setattr(growth_budget, "plan_auto", planner)
    monkeypatch.setattr(growth_budget, "_growth_of", growth)


def test_growth_mode_prices_plans_without_pyops_where_those_with_them_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _big_two_conv()
    _fake_pricing(monkeypatch, model)
    budget = int(15 * MiB / (1 - growth_budget.GROWTH_MARGIN))
    plan = growth_budget.plan_for_growth(model, budget, step_budgets=[4 * KiB], pyops=None)
    records = plan.growth["candidates"]
    assert plan.fits and plan.growth["predicted_growth_bytes"] == 10 * MiB
    assert plan.regions.pyops is False
    # The first descent (PyOps allowed) was priced and missed; the second one was planned without them.
    assert [r["pyops"] for r in records][:2] == [True, True]
    assert any(r["pyops"] is False for r in records)
    assert all(r["predicted_growth_bytes"] != 10 * MiB for r in records if r["pyops"])
    # By default (PyOps allowed, one descent) the mode has nothing that fits.
    only = growth_budget.plan_for_growth(model, budget, step_budgets=[4 * KiB])
    assert not only.fits and all(r["pyops"] for r in only.growth["candidates"])


def test_growth_mode_skips_the_second_descent_when_a_plan_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _big_two_conv()
    _fake_pricing(monkeypatch, model)
    plan = growth_budget.plan_for_growth(model, int(30 * MiB / (1 - growth_budget.GROWTH_MARGIN)),
                                         step_budgets=[4 * KiB], pyops=None)
    assert plan.fits and all(r["pyops"] for r in plan.growth["candidates"])
