"""MaxPools out of ORT's NCHWc layout (passes/planar_pool.py): on a hand-written training graph with a
single-output MaxPool in its backward (the form recomputation emits), ORT's optimised graph has no Reorder
node once the pool is lifted, the predicted memory-pattern block drops by the reorder copy, and ORT's outputs
stay the same bit for bit."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.passes.planar_pool import PlanarPoolPass
from onnxcomp.planner.ort_pattern import ort_optimized_model, predict_pattern_block

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

    monkeypatch.setattr(planar_pool, "_predicted_pattern", lambda model: 1 << 20)
    gated = PlanarPoolPass().run(_model())
    assert not gated.modified and not gated.records
    assert any("would not drop" in s.reason for s in gated.skipped)
    assert PlanarPoolPass(only_lowering=False).run(_model()).modified
