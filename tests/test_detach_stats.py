"""BatchNorm statistics held outside ORT's memory-pattern block (passes/detach_stats.py), on a hand-written
training graph shaped like ResNet-18's stem: the BatchNorm's input dies at the BatchNorm (the backward rebuilds
it), so its saved statistics are laid out on top of two live maps and stay there to the end, where the backward's
three maps then cannot fit below them. Checked: the copies have no static shape in ORT's plan (held outside P),
the predicted block drops, the copies run in the forward under ORT's DEFAULT order, ORT's outputs are the same
bits, and the gate leaves a graph alone where nothing drops."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.analysis.execution_order import in_run_order
from onnxcomp.passes.detach_stats import DetachStatsPass
from onnxcomp.planner.ort_pattern import predict_pattern_block

N, C, H, W = 4, 8, 16, 16


def _model(end_maps: bool = True) -> onnx.ModelProto:
    """Forward: c = Relu(x) read only by the BatchNorm; y → Relu → r, t = r·r the output. Backward: from the seed
    t_grad, ReluGrad, c rebuilt from x, BatchNormalizationGrad; with ``end_maps`` a third map (g·g) is live with
    them at the end."""
    s = f"float[{N},{C},{H},{W}]"
    tail = """
    g2 = Mul (g, g)
    g3 = Add (g2, c2)
    dx, dscale, dbias = com.microsoft.BatchNormalizationGrad <epsilon = 0.00001> (g3, c2, scale, mean, inv)""" \
        if end_maps else """
    dx, dscale, dbias = com.microsoft.BatchNormalizationGrad <epsilon = 0.00001> (g, c2, scale, mean, inv)"""
    vi = f", {s} g2, {s} g3" if end_maps else ""
    return onnx.parser.parse_model(f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
net ({s} x, float[{C}] scale, float[{C}] bias, float[{C}] rm, float[{C}] rv, {s} t_grad)
   => ({s} t, {s} dx, float[{C}] dscale, float[{C}] dbias)
   <{s} c, {s} y, float[{C}] rm_out, float[{C}] rv_out, float[{C}] mean, float[{C}] inv, {s} r, {s} r_grad, {s} g,
    {s} c2{vi}> {{
    c = Relu (x)
    y, rm_out, rv_out, mean, inv = com.microsoft.BatchNormInternal <epsilon = 0.00001, momentum = 0.9> (c, scale, bias, rm, rv)
    r = Relu (y)
    t = Mul (r, r)
    r_grad = Mul (t_grad, r)
    g = com.microsoft.ReluGrad (r_grad, y)
    c2 = Relu (x){tail}
}}
""")


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    f = {"x": rng.standard_normal((N, C, H, W)), "scale": rng.standard_normal(C), "bias": rng.standard_normal(C),
         "rm": np.zeros(C), "rv": np.ones(C), "t_grad": rng.standard_normal((N, C, H, W))}
    return {k: v.astype(np.float32) for k, v in f.items()}


def _run(model: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()      # ORT's defaults: arena, memory pattern, buffer reuse, DEFAULT order
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(["t", "dx", "dscale", "dbias"], _feeds())


def test_detached_statistics_leave_the_pattern_block_and_keep_the_bits(tmp_path):
    model = _model()
    result = DetachStatsPass().run(model)
    assert result.modified and len(result.records) == 1
    rec = result.records[0]
    assert rec["statistics"] == ["mean", "inv"] and rec["exact"] is True
    before, after = rec["pattern_block_bytes"]
    assert after < before                                   # the gate's replay: the block drops
    p_before, p_after = tmp_path / "before.onnx", tmp_path / "after.onnx"
    onnx.save(model, p_before)
    onnx.save(result.model, p_after)
    block_before, block_after = predict_pattern_block(p_before), predict_pattern_block(p_after)
    assert block_after.size < block_before.size             # ORT's own optimised graph agrees
    assert {"mean", "inv"} <= set(block_before.offsets)     # held in P before ...
    assert set(rec["copies"]) <= set(block_after.dynamic)   # ... sized only at run time after: outside P
    # The copies run in the forward pass under ORT's DEFAULT order: before the first backward node.
    order = [n.name or n.output[0] for n in in_run_order(result.model, "default").graph.node]
    names = {n.output[0]: (n.name or n.output[0]) for n in result.model.graph.node}
    first_backward = order.index(names["g"])
    for copy in rec["copies"]:
        assert order.index(names[copy]) < first_backward
    for got, want in zip(_run(result.model), _run(model)):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    again = DetachStatsPass().run(result.model)
    assert not again.records
    # The copies' bytes ride in the metadata: a second analysis (inspect, another transform) sizes them.
    from onnxcomp.analysis import analyze_model
    from onnxcomp.static_batch import unresolved_stashes

    sized = {t.name: t.nbytes for t in analyze_model(result.model).stashed}
    assert all(sized[c] == rec["bytes"] // 2 > 0 for c in rec["copies"])
    assert not set(rec["copies"]) & set(unresolved_stashes(result.model))


def test_the_gate_leaves_a_graph_alone_where_the_block_would_not_drop(monkeypatch):
    import dataclasses

    import onnxcomp.passes.detach_stats as ds

    real, calls = ds._replayed, []

    def replayed(model):       # the graph as given: its real block; every trial: a block that did not drop
        block = real(model)
        calls.append(block.size)
        return block if len(calls) == 1 else dataclasses.replace(block, size=calls[0])

    monkeypatch.setattr(ds, "_replayed", replayed)
    model = _model()
    assert DetachStatsPass(only_lowering=False).run(model).modified     # the rewrite applies ...
    gated = DetachStatsPass().run(model)                                # ... but is not kept
    assert len(calls) == 2 and not gated.modified and not gated.records
    assert any("lowers the replayed pattern block" in s.reason for s in gated.skipped)


@pytest.mark.parametrize("reader", ["Mul", "Relu"])
def test_statistics_a_forward_node_reads_are_left_alone(reader):
    model = _model()
    extra = onnx.helper.make_node(reader, ["mean", "mean"] if reader == "Mul" else ["mean"], ["m2"])
    model.graph.node.insert(2, extra)
    model.graph.output.append(onnx.helper.make_tensor_value_info("m2", onnx.TensorProto.FLOAT, [C]))
    result = DetachStatsPass(only_lowering=False).run(model)
    assert not result.modified
    assert any("other than a backward BatchNormalizationGrad" in s.reason for s in result.skipped)
