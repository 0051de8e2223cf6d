"""MaxPools out of ORT's NCHWc layout (passes/planar_pool.py): on a hand-written training graph with a
single-output MaxPool in its backward (the form recomputation emits), ORT's optimised graph has no Reorder
node once the pool is lifted, the predicted memory-pattern block drops by the reorder copy, and ORT's outputs
stay the same bit for bit."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

import onnx_ir as ir

from onnxcomp.passes.base import OnnxcompPass, PassOutcome
from onnxcomp.passes.planar_pool import PlanarPoolPass, finish_with_pool_gate
from onnxcomp.planner.ort_pattern import PatternBlock, ort_optimized_model, predict_pattern_block

N, C, H, W = 4, 16, 32, 32     # C: a multiple of every NCHWc block (8 with AVX2, 16 with AVX-512F)


def _model(channels: int = C, kernel: int = 2, pads: str = "") -> onnx.ModelProto:
    """Forward Relu → MaxPool with indices (what ORT's gradient builder leaves), and in the backward the
    MaxPool recomputed without indices from the Relu output, read by a product with the incoming gradient."""
    oh, ow = H // 2, W // 2
    return onnx.parser.parse_model(f"""
<ir_version: 8, opset_import: ["" : 17]>
net (float[{N},{channels},{H},{W}] x, float[{N},{channels},{oh},{ow}] Y_grad)
   => (float[{N},{channels},{oh},{ow}] p, int64[{N},{channels},{oh},{ow}] idx, float[{N},{channels},{oh},{ow}] g) {{
    r = Relu (x)
    p, idx = MaxPool <kernel_shape = [{kernel}, {kernel}], strides = [2, 2]{pads}> (r)
    pr = MaxPool <kernel_shape = [{kernel}, {kernel}], strides = [2, 2]{pads}> (r)
    g = Mul (pr, Y_grad)
}}
""")


def _run(model: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((N, C, H, W)).astype(np.float32),
             "Y_grad": rng.standard_normal((N, C, H // 2, W // 2)).astype(np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["p", "idx", "g"], feeds)


def _reorders(path) -> list[str]:
    return [n.op_type for n in ort_optimized_model(path).graph.node if n.op_type.startswith("Reorder")]


@pytest.mark.parametrize("kernel,pads", [(2, ""), (3, ", pads = [1, 1, 1, 1]")])
def test_a_lifted_maxpool_has_no_reorder_copies_and_the_same_bits(tmp_path, kernel, pads):
    model = _model(kernel=kernel, pads=pads)
    result = PlanarPoolPass().run(model)
    assert result.modified and len(result.records) == 1          # the backward's pool only: the forward keeps idx
    lifted = next(n for n in result.model.graph.node if n.op_type == "MaxPool" and len(n.output) == 1)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in lifted.attribute}
    assert attrs["kernel_shape"] == [1, kernel, kernel] and attrs["strides"] == [1, 2, 2]
    if pads:
        assert attrs["pads"] == [0, 1, 1, 0, 1, 1]
    before, after = tmp_path / "before.onnx", tmp_path / "after.onnx"
    onnx.save(model, before)
    onnx.save(result.model, after)
    # ORT's NCHWc transformer wraps the 2-D pool in a ReorderInput/ReorderOutput pair, not the 3-D one.
    assert sorted(_reorders(before)) == ["ReorderInput", "ReorderOutput"]
    assert _reorders(after) == []
    # The ReorderInput copy of the Relu output (N·C·H·W floats) was a buffer of its own in ORT's pattern.
    p_before, p_after = predict_pattern_block(before).size, predict_pattern_block(after).size
    assert p_before - p_after >= N * C * H * W * 4
    for got, want in zip(_run(result.model), _run(model)):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    again = PlanarPoolPass().run(result.model)
    assert not again.modified and not again.records


def test_pools_orts_transformer_leaves_alone_are_left_alone():
    # 12 channels: no multiple of an NCHWc block, so ORT would not wrap the pool.
    result = PlanarPoolPass(only_lowering=False).run(_model(channels=12))
    assert not result.modified
    assert any("no multiple of the NCHWc block" in s.reason for s in result.skipped)


def test_an_unread_pool_output_gets_no_view():
    """A pool nothing reads (a chunked chain's last top pool) is lifted without a Reshape nobody would read."""
    model = _model()
    g = next(n for n in model.graph.node if n.op_type == "Mul")
    g.input[0] = "Y_grad"                                   # g = Y_grad · Y_grad: nothing reads pr any more
    result = PlanarPoolPass(only_lowering=False).run(model)
    assert result.modified
    assert [n.op_type for n in result.model.graph.node].count("Reshape") == 0
    lifted = next(n for n in result.model.graph.node if n.op_type == "MaxPool" and len(n.output) == 1)
    assert lifted.output[0] == "pr"


def test_the_gate_leaves_a_graph_whose_pattern_would_not_drop(monkeypatch):
    """``only_lowering``: the lift is kept only where ORT's predicted pattern block drops (lossy plain_deep's
    row-split forward pools: it would rise). The prediction is stubbed to say "no drop" here."""
    from onnxcomp.passes import planar_pool

    monkeypatch.setattr(planar_pool, "_predicted_pattern", lambda model, base_dir=None: _block(1 << 20))
    gated = PlanarPoolPass().run(_model())
    assert not gated.modified and not gated.records
    assert any("would not drop" in s.reason for s in gated.skipped)
    assert PlanarPoolPass(only_lowering=False).run(_model()).modified


def _block(size: int, source: str = "ort", reason: str | None = None) -> PatternBlock:
    return PatternBlock(size, {}, [], None, source=source, fallback_reason=reason)  # type: ignore[arg-type]


class _MarkLiftedGraphs(OnnxcompPass):
    """A finishing pass that treats lifted graphs differently (as the reuse pass's views and order can): it
    appends a marker node only to a graph with a 3-D MaxPool."""

    name = "mark_lifted"
    full_check = False

    def call(self, model: ir.Model) -> PassOutcome:
        if not any(n.op_type == "MaxPool" and len(n.attributes["kernel_shape"].value) == 3 for n in model.graph):
            return PassOutcome(model, False)
        y = next(iter(model.graph.outputs))
        node = ir.node("Identity", [y], name="finished_marker")
        node.outputs[0].name = "marker"
        model.graph.append(node)
        return PassOutcome(model, True)


def _stub_pattern(model: ir.Model, base_dir=None) -> PatternBlock:
    """Stub P: the lifted graph is smaller (no reorder copy) *before* the finishing pass, larger after it."""
    names = {n.name for n in model.graph}
    lifted = any(n.op_type == "MaxPool" and len(n.attributes["kernel_shape"].value) == 3 for n in model.graph)
    return _block(3000 if "finished_marker" in names else 1000 if lifted else 2000)


def test_the_lift_is_judged_on_the_finished_graph(monkeypatch):
    """Where the passes after the lift make the lifted graph's block the larger one, the lift is not kept, although
    judged on its own (as the pass's own gate does) it lowers the block: the transform's gate compares the two
    finished graphs (lossy plain_deep: lowered before the last passes, +0.2 MiB growth after them)."""
    from onnxcomp.passes import planar_pool

    monkeypatch.setattr(planar_pool, "_predicted_pattern", _stub_pattern)
    assert PlanarPoolPass().run(_model()).modified               # the pass's own gate, before the finishing pass
    model = ir.serde.deserialize_model(_model())
    out, log, gate = finish_with_pool_gate(model, lambda: [_MarkLiftedGraphs()])
    assert gate == {"plain_bytes": 2000, "lifted_bytes": 3000, "lifted": False, "source": "ort", "pools": 1}
    assert out is model and not log.records and "planar_pool" not in log.modified_by
    assert all(n.op_type != "MaxPool" or len(n.attributes["kernel_shape"].value) == 2 for n in out.graph)
    assert any(s["pass"] == "planar_pool" and "would not drop" in s["reason"] for s in log.skipped)


def test_the_gate_keeps_the_lift_where_the_finished_block_drops(tmp_path):
    """Unstubbed: ORT's own optimisation and the replay of both finished graphs (nothing after the lift here)."""
    model = ir.serde.deserialize_model(_model())
    out, log, gate = finish_with_pool_gate(model, lambda: [])
    assert gate is not None and gate["lifted"] and gate["source"] == "ort" and "fallback_reason" not in gate
    assert gate["plain_bytes"] - gate["lifted_bytes"] >= N * C * H * W * 4
    assert out is not model and log.modified_by == ["planar_pool"]
    assert log.records[0].detail["pattern_block_bytes"] == [gate["plain_bytes"], gate["lifted_bytes"]]
    saved = tmp_path / "m.onnx"
    onnx.save(ir.serde.serialize_model(out), saved)
    assert predict_pattern_block(saved).size == gate["lifted_bytes"]      # the figure is the saved graph's


def test_an_ort_set_up_failure_is_reported_not_silent(monkeypatch, caplog):
    """Where ORT cannot set a graph up, both graphs are replayed, and the gate's figures say so and why."""
    from onnxcomp.planner import ort_pattern

    def fail(*args, **kwargs):
        raise RuntimeError("no session here")

    monkeypatch.setattr(ort_pattern, "predict_pattern_block_of", fail)
    model = ir.serde.deserialize_model(_model())
    with caplog.at_level("WARNING", logger="onnxcomp.planner.ort_pattern"):
        _, _, gate = finish_with_pool_gate(model, lambda: [])
    assert gate is not None and gate["source"] == "replay"
    assert gate["fallback_reason"] == "RuntimeError: no session here"
    assert "planar_pool's gate" in caplog.text and "no session here" in caplog.text


def test_a_graph_without_maxpools_is_finished_once_without_a_gate():
    model = ir.serde.deserialize_model(onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
net (float[4, 16] x) => (float[4, 16] y) {
    y = Relu (x)
}
"""))
    runs = []

    def finishing():
        runs.append(1)
        return []

    out, log, gate = finish_with_pool_gate(model, finishing)
    assert out is model and gate is None and runs == [1] and not log.records
