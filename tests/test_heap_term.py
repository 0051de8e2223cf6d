"""The heap term of the planner's predicted step peak (planner/heap_term.py, issue 12): glibc heap pages a step's
small blocks touch above its live data, a fitted linear function of the graph's nodes and PyOps. Small
hand-written graphs; the fit's coefficients against docs/auto/heapterm/fit.json and the tool that makes it."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import onnx
import pytest

from graphs import TWO_CONV, parse
from onnxcomp.planner import auto, heap_term
from onnxcomp.planner.auto import AutoPlan, Regions, plan_auto, tightest_budget_for
from onnxcomp.planner.heap_term import COEFFICIENTS, HeapFeatures, heap_features

REPO = Path(__file__).resolve().parents[1]
FIT = REPO / "docs" / "auto" / "heapterm"
MiB = 1 << 20
KiB = 1 << 10


def _big_two_conv() -> onnx.ModelProto:
    """TWO_CONV at batch 8, 32x32: each stash 128 KiB, above the encoders' 64 KiB floor."""
    return parse(TWO_CONV.replace("float[2,3,8,8] input", "float[8,3,32,32] input"))


def _more_nodes(extra: int) -> onnx.ModelProto:
    """TWO_CONV with ``extra`` more forward nodes (a chain of Relu on the first ReLU's output): same tensors
    live at the peak, more nodes."""
    chain = "".join(f"  y{i + 1} = Relu (y{i})\n" for i in range(extra))
    text = TWO_CONV.replace("  y = Relu (x)\n", "  y0 = Relu (x)\n" + chain + f"  y = Identity (y{extra})\n")
    return parse(text)


def test_features_count_nodes_pyops_and_heap_sized_tensors() -> None:
    model = parse(TWO_CONV)
    f = heap_features(model)
    assert f.nodes == len(model.graph.node) == 11
    assert f.pyops == 0 and f.pyop_bytes == 0
    # Every transient tensor of this tiny graph is far under the 128 KiB mmap threshold: all on the heap.
    assert 0 < f.small_buffers <= f.nodes + 2 and 0 < f.small_bytes < 64 * KiB
    # A PyOp (onnxruntime-extensions domain) is counted, with the bytes the bridge copies in and out.
    g = onnx.ModelProto()
    g.CopyFrom(model)
    node = onnx.helper.make_node("OnnxcompEncode_probe", ["x"], ["x_enc"], domain=heap_term.PYOP_DOMAIN)
    g.graph.node.insert(1, node)
    g.opset_import.append(onnx.helper.make_opsetid(heap_term.PYOP_DOMAIN, 1))
    fp = heap_features(g)
    assert fp.nodes == f.nodes + 1 and fp.pyops == 1 and fp.pyop_bytes >= 2 * 4 * 8 * 8 * 4


def test_more_nodes_predict_a_larger_term() -> None:
    terms = [heap_term.heap_term(heap_features(_more_nodes(k))) for k in (1, 20, 200)]
    assert terms[0] < terms[1] < terms[2]
    # Linear in the nodes: 180 more nodes cost 180 x the fitted bytes per node (to the byte's rounding).
    assert abs((terms[2] - terms[1]) - 180 * COEFFICIENTS["nodes"]) <= 2
    # PyOps cost more than plain nodes (the bridge's NumPy copies); a zero graph costs nothing.
    assert heap_term.heap_term(HeapFeatures(10, 1, 0, 0, 0)) > heap_term.heap_term(HeapFeatures(11, 0, 0, 0, 0))
    assert heap_term.heap_term(HeapFeatures(0, 0, 0, 0, 0)) == 0


def test_the_planner_peak_counts_the_term() -> None:
    model = _big_two_conv()
    seen, live = auto.predicted_live_both_orders(model)
    peak, _ = auto._peak_buffers(seen, live)
    assert peak == int(live.max()) + auto.predicted_heap(seen)
    assert auto.predicted_heap(seen) == heap_term.heap_term(heap_features(seen)) > 0


def test_a_budget_met_without_the_term_is_refused_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _big_two_conv()
    monkeypatch.setattr(heap_term, "COEFFICIENTS", {})
    floor = plan_auto(model, 4 * KiB, exact=True)
    assert not floor.fits and floor.heap_bytes == 0
    budget = tightest_budget_for(floor.predicted_peak) + KiB
    without = plan_auto(model, budget, exact=True)
    assert without.fits
    monkeypatch.setattr(heap_term, "COEFFICIENTS", dict(COEFFICIENTS))
    with_term = plan_auto(model, budget, exact=True)
    assert not with_term.fits and with_term.heap_bytes > 0
    assert with_term.predicted_peak > with_term.target
    with pytest.raises(auto.BudgetError):
        from onnxcomp.transform import transform_model

        transform_model(model, "auto", budget_bytes=budget, exact=True)


def test_failure_line_names_the_heap_term_where_it_dominates() -> None:
    plan = AutoPlan(12 * MiB, False, 10 * MiB, {}, Regions(), 15 * MiB, 90 * MiB, False,
                    [("layer4.weight_grad", 2 * MiB), ("x", MiB)], heap_bytes=8 * MiB, nodes=14_769)
    line = plan.failure_line()
    assert "heap pages of 14,769 nodes' small blocks (8.0 MiB), layer4.weight_grad (2.0 MiB)" in line
    assert plan.summary()["predicted_heap_bytes"] == 8 * MiB


def _fit_tool():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("heap_term_fit", REPO / "tools" / "heap_term_fit.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_coefficients_are_the_committed_fit_of_the_committed_data() -> None:
    fit = json.loads((FIT / "fit.json").read_text())
    rows = json.loads((FIT / "fit_data.json").read_text())
    # The planner uses the fit's coefficients ...
    assert set(COEFFICIENTS) == set(fit["coefficients"])
    for k, v in fit["coefficients"].items():
        assert COEFFICIENTS[k] == pytest.approx(v, rel=1e-3)
    # ... the fit is the tool's on the data kept beside it, over several graphs (nets), not one ...
    again = _fit_tool().fit(rows, fit["features"], fit["const"])
    for k, v in again["coefficients"].items():
        assert v == pytest.approx(fit["coefficients"][k], rel=1e-6)
    assert len({r["name"].split(".")[0] for r in rows}) >= 5
    # ... and its stated error is what the data give.
    assert again["rms_residual"] == pytest.approx(fit["rms_residual"], rel=1e-6)


def test_fit_recovers_a_known_linear_term() -> None:
    rows = [{"name": f"net{i}.p", "features": {"nodes": n, "pyops": p}, "excess_max": 500 * n + 30000 * p}
            for i, (n, p) in enumerate([(100, 0), (1000, 4), (5000, 50), (12000, 6), (28000, 0), (2000, 36)])]
    res = _fit_tool().fit(rows, ["nodes", "pyops"], False)
    assert res["coefficients"]["nodes"] == pytest.approx(500, rel=1e-6)
    assert res["coefficients"]["pyops"] == pytest.approx(30000, rel=1e-6)
    assert res["rms_residual"] < 1


def test_a_fitting_plan_is_priced_on_the_graph_transform_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """transform's last passes (views, ...) add nodes the planner's graph lacks; the term was fitted on written
    graphs, so a plan that would fit is priced on the written graph: where that has more nodes, the peak rises."""
    model = _big_two_conv()
    plan = plan_auto(model, 10 * auto.predicted_live(model)[1].max().item(), exact=True)
    assert plan.fits and plan.applied is not None
    # Pretend transform's last passes add 500 nodes (a chain of Identity on the graph input is what they add here).
    from onnxcomp import transform as transform_mod
    from onnxcomp.passes.base import OnnxcompPass, PassOutcome

    class _AddNodes(OnnxcompPass):
        name = "add_nodes_probe"
        full_check = False

        def call(self, model):  # noqa: ANN001, ANN201
            import onnx_ir as ir

            v = model.graph.inputs[0]
            for i in range(500):
                node = ir.Node("", "Identity", [v], name=f"probe_{i}", num_outputs=1)
                node.outputs[0].name = f"probe_out_{i}"
                model.graph.append(node)
            return PassOutcome(model, True)

    monkeypatch.setattr(transform_mod, "last_passes", lambda records, lift_convs=True: [_AddNodes()])
    with auto.memo.planning_session():
        seen, live = auto.predicted_live_both_orders(plan.model)
        heap = auto.predicted_heap(seen)
        written = auto.written_heap(plan.applied)
        assert written >= heap + 490 * COEFFICIENTS["nodes"]      # the 500 nodes (less a node or two: the
                                                                  # planner's graph has DefaultOrderPass's deletions)
        peak, h = auto._with_written_heap(plan.applied, int(live.max()) + heap, heap, 1 << 40)
        assert h == written > heap and peak == int(live.max()) + written
        # A plan already over its target is not re-priced (no last passes run for it).
        assert auto._with_written_heap(plan.applied, 10, heap, 5) == (10, heap)
