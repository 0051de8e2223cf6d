"""The planning session cache (planner/memo.py) changes how fast a plan is found, never which plan: decisions,
predicted peaks, rounds and the rewritten graph are compared with a run that caches nothing, on hand-written
graphs (default run) and on a suite net (slow)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from graphs import TWO_CONV, parse
from onnxcomp.planner import memo
from onnxcomp.planner.auto import plan_auto, predicted_live_both_orders, tightest_budget_for
from test_auto_rows import _chain3

KiB = 1 << 10


def _two_conv() -> onnx.ModelProto:
    return parse(TWO_CONV.replace("float[2,3,8,8] input", "float[8,3,32,32] input"))


def _plan_record(model: onnx.ModelProto, budget: int, exact: bool, cache: bool) -> dict:
    """Everything a plan decides, and the graph it writes, with or without the session cache."""
    if cache:
        before = memo.stats()["hits"]
        plan = plan_auto(model, budget, exact=exact)
        assert memo.stats()["hits"] > before, "plan_auto ran without its session cache"
    else:
        with memo.disabled():
            plan = plan_auto(model, budget, exact=exact)
    summary = plan.summary()
    return {"summary": summary, "chosen": sorted((k, o.technique, o.held) for k, o in plan.chosen.items()),
            "regions": plan.regions, "graph": plan.model.SerializeToString(deterministic=True)}


def _assert_same_plan(model: onnx.ModelProto, budget: int, exact: bool) -> dict:
    reference = _plan_record(model, budget, exact, cache=False)
    cached = _plan_record(model, budget, exact, cache=True)
    for key in ("chosen", "regions", "graph"):
        assert cached[key] == reference[key], key
    assert cached["summary"] == reference["summary"]
    return cached["summary"]


@pytest.mark.parametrize("exact", [False, True])
def test_cached_plan_is_the_uncached_plan_on_two_convs(exact: bool) -> None:
    model = _two_conv()
    floor = _assert_same_plan(model, 4 * KiB, exact)               # unreachable: every search runs
    assert not floor["fits"] and floor["decisions"]
    fitting = _assert_same_plan(model, tightest_budget_for(floor["predicted_peak_bytes"]) + KiB, exact)
    assert fitting["fits"]


@pytest.mark.slow   # ~16-25 s of planning; the pass / memo unit tests stay in the default run
def test_cached_plan_is_the_uncached_plan_with_a_row_split() -> None:
    # CHAIN3's lossy floor needs the row-split search (plan_auto's second search, its own base graph).
    summary = _assert_same_plan(_chain3(), 4 * KiB, exact=False)
    assert any(d.get("technique") == "row_split" for d in summary["decisions"])


def test_cached_live_curves_are_copies() -> None:
    model = _two_conv()
    with memo.planning_session():
        _, first = predicted_live_both_orders(model)
        expected = first.copy()
        first += 1 << 30                                           # a caller adding to its curve in place
        seen, again = predicted_live_both_orders(model)
        assert np.array_equal(again, expected)
        assert predicted_live_both_orders(model)[0] is seen        # ... and the graph itself is shared


def test_a_session_ends_with_its_block() -> None:
    model = _two_conv()
    with memo.planning_session():
        assert memo.active()
        predicted_live_both_orders(model)
        hits = memo.stats()["hits"]
        predicted_live_both_orders(model)
        assert memo.stats()["hits"] > hits
    assert not memo.active()
    hits = memo.stats()["hits"]
    predicted_live_both_orders(model)
    predicted_live_both_orders(model)
    assert memo.stats()["hits"] == hits


@pytest.mark.slow
@pytest.mark.parametrize("name, exact", [("plain_deep", False), ("leaky_vgg", True)])
def test_cached_plan_is_the_uncached_plan_on_a_suite_net(name: str, exact: bool, tmp_path: Path) -> None:
    from onnxcomp.models.artifacts import generate_artifacts
    from onnxcomp.models.suite import SUITE_BATCH, suite_image

    art = tmp_path / name
    generate_artifacts(name, SUITE_BATCH[name], suite_image(name), 10, art, overwrite=True, smoke_test=False)
    model = onnx.load(str(art / "training_model.onnx"))
    summary = _assert_same_plan(model, 1 << 16, exact)
    assert summary["decisions"] and summary["predicted_peak_bytes"] < summary["baseline_predicted_peak_bytes"]
