"""Attention backward in head/batch chunks (passes/chunk_attention.py): a hand-written attention block with
ORT's gradient ops, chunked, gives bit-identical gradients; and the region is found by shapes, not names."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from conftest import tensor_ancestors
from onnxcomp.passes.chunk_attention import ChunkedAttentionBackwardPass

B, H, T, D = 2, 3, 8, 4

# The pattern ORT's gradient builder emits for softmax(QKᵀ·s, causal mask) → dropout → ·V (node names are
# arbitrary on purpose: the pass must not rely on them). The forward dropout is a product with the kept
# mask's scale (given, so the graph is deterministic); Y_grad is the gradient seed.
ATTENTION = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
attn (float[{B},{H},{T},{D}] q, float[{B},{H},{D},{T}] kt, float[{B},{H},{T},{D}] v, bool[{B},{H},{T},{T}] keep,
      float[{B},{H},{T},{T}] keep_scale, bool[1,1,{T},{T}] causal, float[{B},{H},{T},{D}] Y_grad)
   => (float[{B},{H},{T},{D}] y, float[{B},{H},{T},{D}] dq, float[{B},{H},{D},{T}] dkt, float[{B},{H},{T},{D}] dv) {{
    scale = Constant <value = float {{0.5}}> ()
    neg = Constant <value = float {{-1e9}}> ()
    zero = Constant <value = float {{0.0}}> ()
    ratio = Constant <value = float {{0.25}}> ()
    on = Constant <value = bool {{1}}> ()
    s = MatMul (q, kt)
    ss = Mul (s, scale)
    w = Where (causal, ss, neg)
    p = Softmax <axis = -1> (w)
    pd = Mul (p, keep_scale)
    y = MatMul (pd, v)
    dv = com.microsoft.FusedMatMul <transA = 1> (pd, Y_grad)
    dpd = com.microsoft.FusedMatMul <transB = 1> (Y_grad, v)
    dp = com.microsoft.DropoutGrad (dpd, keep, ratio, on)
    dw = com.microsoft.SoftmaxGrad_13 <axis = -1> (dp, p)
    dss = Where (causal, dw, zero)
    ds = Mul (dss, scale)
    dq = com.microsoft.FusedMatMul <transB = 1> (ds, kt)
    dkt = com.microsoft.FusedMatMul <transA = 1> (q, ds)
}}
"""


def _model() -> onnx.ModelProto:
    return onnx.parser.parse_model(ATTENTION)


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    f = {n: rng.standard_normal(s).astype(np.float32) for n, s in
         (("q", (B, H, T, D)), ("kt", (B, H, D, T)), ("v", (B, H, T, D)), ("Y_grad", (B, H, T, D)))}
    f["keep"] = rng.random((B, H, T, T)) > 0.25
    f["keep_scale"] = f["keep"].astype(np.float32) / np.float32(0.75)
    f["causal"] = np.tril(np.ones((T, T), dtype=bool))[None, None]
    return f


def _run(model: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(["y", "dq", "dkt", "dv"], _feeds())


@pytest.mark.parametrize("chunks,axis", [(2, 1), (3, 1), (8, 1)])
def test_chunked_attention_backward_is_bit_identical(chunks, axis):
    model = _model()
    result = ChunkedAttentionBackwardPass(chunks=chunks, min_bytes=0).run(model)
    (rec,) = result.records
    assert rec.kind == "chunked" and rec["exact"] is True
    assert rec["axis"] == axis and rec["chunks"] == min(chunks, (B, H)[axis])   # the larger leading axis
    assert sorted(rec["op_types"]) == sorted(["FusedMatMul"] * 4 + ["DropoutGrad", "SoftmaxGrad_13", "Where", "Mul"])
    names = [n.name for n in result.model.graph.node if n.name]
    assert sum(n.op_type == "SoftmaxGrad_13" for n in result.model.graph.node) == rec["chunks"]
    assert sum(n.op_type == "Concat" for n in result.model.graph.node) == 3          # dq, dkt, dv
    assert len(set(names)) == len(names)
    assert [o.name for o in result.model.graph.output] == ["y", "dq", "dkt", "dv"]
    for got, want in zip(_run(result.model), _run(model)):
        np.testing.assert_array_equal(got, want)


def test_forward_and_broadcast_inputs_are_left_whole():
    result = ChunkedAttentionBackwardPass(chunks=2, min_bytes=0).run(_model())
    g = result.model.graph
    sliced = {n.input[0] for n in g.node if n.op_type == "Slice"}
    assert {"Y_grad", "v", "kt", "q", "keep", "p", "pd"} <= sliced        # per-slice inputs, forward ones too
    assert "causal" not in sliced                                          # broadcasts over batch and heads
    forward_ops = [n.op_type for n in g.node][:11]
    assert forward_ops == ["Constant"] * 5 + ["MatMul", "Mul", "Where", "Softmax", "Mul", "MatMul"]  # untouched


def test_min_bytes_and_non_attention_graphs_are_left_alone():
    big = ChunkedAttentionBackwardPass(min_bytes=1 << 30).run(_model())
    assert not big.records and "min_bytes" in big.skipped[0].reason
    # A softmax over a rank-2 tensor (a classifier) has no leading axes to chunk.
    flat = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[4,5] x, float[4,5] y_grad) => (float[4,5] dx) {
        p = Softmax <axis = -1> (x)
        dx = com.microsoft.SoftmaxGrad_13 <axis = -1> (y_grad, p)
    }""")
    assert not ChunkedAttentionBackwardPass(min_bytes=0).run(flat).records


def test_one_chunk_alive_at_a_time_under_default_order():
    """Chunk c + 1's slices wait on chunk c's outputs: every slice of a later chunk reads a start that
    depends on the previous chunk's products (so ORT cannot interleave the chunks' T² tensors)."""
    result = ChunkedAttentionBackwardPass(chunks=3, min_bytes=0).run(_model())
    g = result.model.graph

    grads = [n for n in g.node if n.op_type == "SoftmaxGrad_13"]
    for earlier, later in zip(grads, grads[1:]):
        assert earlier.output[0] in tensor_ancestors(g, later.output[0])


# -- forward: scores to the product with V in chunks; the Dropout's mask drawn as before -------------------
FORWARD = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
attn_fwd (float[{B},{H},{T},{D}] q, float[{B},{H},{D},{T}] kt, float[{B},{H},{T},{D}] v, bool[1,1,{T},{T}] causal,
          float[{B},{H},{T},{D}] Y_grad) => (float[{B},{H},{T},{D}] y, bool[{B},{H},{T},{T}] keep,
          float[{B},{H},{T},{D}] g) {{
    scale = Constant <value = float {{0.5}}> ()
    neg = Constant <value = float {{-1e9}}> ()
    ratio = Constant <value = float {{0.25}}> ()
    on = Constant <value = bool {{1}}> ()
    s = MatMul (q, kt)
    ss = Mul (s, scale)
    w = Where (causal, ss, neg)
    p = Softmax <axis = -1> (w)
    pd, keep = Dropout (p, ratio, on)
    y = MatMul (pd, v)
    g = Mul (y, Y_grad)
}}
"""


def _run_seeded(model: onnx.ModelProto, names: list[str]) -> list[np.ndarray]:
    import onnxruntime as ort

    ort.set_seed(7)    # the process-wide generator ORT's Dropout draws from (measure seeds it the same way)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {k: v for k, v in _feeds().items() if k in {i.name for i in model.graph.input}}
    return sess.run(names, feeds)


@pytest.mark.parametrize("chunks,zeros", [(2, np.float32), (3, np.float32), (2, np.float16)])
def test_chunked_attention_forward_is_bit_identical(chunks, zeros):
    from onnxcomp.passes.chunk_attention import ChunkedAttentionForwardPass

    model = onnx.parser.parse_model(FORWARD)
    result = ChunkedAttentionForwardPass(chunks=chunks, min_bytes=0, zeros_dtype=zeros).run(model)
    (rec,) = result.records
    assert rec["exact"] and rec["mask_drawn_from"] == f"{np.dtype(zeros).name} zeros"
    assert rec["chunks"] == min(chunks, H)
    g = result.model.graph
    assert sum(n.op_type == "Softmax" for n in g.node) == rec["chunks"]
    dropout = next(n for n in g.node if n.op_type == "Dropout")
    producer = {o: n for n in g.node for o in n.output}
    assert producer[dropout.input[0]].op_type == "ConstantOfShape"      # the draw reads zeros
    # Same mask (the generator's draw does not depend on the data or its type), same outputs, bit for bit.
    for got, want in zip(_run_seeded(result.model, ["y", "keep", "g"]), _run_seeded(model, ["y", "keep", "g"])):
        np.testing.assert_array_equal(got, want)


def test_forward_left_alone_while_the_probabilities_are_stashed():
    from onnxcomp.passes.chunk_attention import ChunkedAttentionForwardPass

    # P also read in backward (no recompute pass ran): chunking the forward would not free it.
    stashed = FORWARD.replace("g = Mul (y, Y_grad)", "gy = Mul (y, Y_grad)\n    g = com.microsoft.SoftmaxGrad_13 "
                              "<axis = -1> (gy, p)").replace(f"float[{B},{H},{T},{D}] g)", f"float[{B},{H},{T},{T}] g)")
    stashed = stashed.replace("gy = Mul (y, Y_grad)", "gt = MatMul (Y_grad, kt)\n    gy = Mul (gt, gt)")
    result = ChunkedAttentionForwardPass(chunks=2, min_bytes=0).run(onnx.parser.parse_model(stashed))
    assert not result.records
    assert any("read elsewhere" in s.reason for s in result.skipped)


def test_a_second_run_leaves_the_chunks_alone():
    from onnxcomp.passes.chunk_attention import ChunkedAttentionForwardPass

    once = ChunkedAttentionBackwardPass(chunks=3, min_bytes=0).run(_model()).model
    assert not ChunkedAttentionBackwardPass(chunks=3, min_bytes=0).run(once).records
    fwd = ChunkedAttentionForwardPass(chunks=3, min_bytes=0).run(onnx.parser.parse_model(FORWARD)).model
    assert not ChunkedAttentionForwardPass(chunks=3, min_bytes=0).run(fwd).records
