"""Issue 15, ViT / sequence-length work: linear layers' outputs rebuilt in backward (LinearRecomputePass,
exact) and the forward attention Dropout drawn per chunk (ChunkedAttentionForwardPass(chunk_dropout_bytes),
lossy policies only: statistically equivalent, not bit-identical). Hand-written graphs, ORT's kernels."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from test_chunk_attention import B, FORWARD, H, T, _feeds, _run_seeded

# A pre-norm MLP with ORT's backward ops: x → LayerNorm → ·W1ᵀ + b1 (h, the GELU input) → GELU → ·W2ᵀ. ORT keeps
# h (GeluGrad), the LayerNorm output (dW1), x (LayerNormalizationGrad) and W1ᵀ (dX) for backward.
MLP = """
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,4,8] input, float[8] gamma, float[8] beta, float[16,8] w1, float[16] b1, float[8,16] w2,
       float[16,8] w1_GRADBUF, float[8,16] w2_GRADBUF, bool lazy_reset_grad, float loss_grad) => (bool w1_out, float[2,4,8] dx)
{
  x = Mul (input, input)
  ln, mean, inv_std = LayerNormalization <axis=-1, epsilon=0.00001> (x, gamma, beta)
  w1t = Transpose <perm=[1,0]> (w1)
  mm = MatMul (ln, w1t)
  h = Add (b1, mm)
  g = com.microsoft.Gelu (h)
  w2t = Transpose <perm=[1,0]> (w2)
  o = MatMul (g, w2t)
  loss = ReduceSum <keepdims=0> (o)
  o_shape = Shape (o)
  do = Expand (loss_grad, o_shape)
  dg = com.microsoft.FusedMatMul <transB=1> (do, w2t)
  dh = com.microsoft.GeluGrad (dg, h)
  ln2d_shape = Constant <value = int64[2] {8, 8}> ()
  ln2d = Reshape (ln, ln2d_shape)
  dh2d = Reshape (dh, ln2d_shape_16)
  ln2d_shape_16 = Constant <value = int64[2] {8, 16}> ()
  w1_grad = com.microsoft.FusedMatMul <transA=1> (dh2d, ln2d)
  dln = com.microsoft.FusedMatMul <transB=1> (dh, w1t)
  dx, dgamma, dbeta = com.microsoft.LayerNormalizationGrad <axis=-1, epsilon=0.00001> (dln, x, gamma, mean, inv_std)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_GRADBUF, w1_grad, lazy_reset_grad)
}
"""


def _mlp() -> onnx.ModelProto:
    text = MLP.replace("  dh2d = Reshape (dh, ln2d_shape_16)\n  ln2d_shape_16 = Constant <value = int64[2] {8, 16}> ()\n",
                       "  ln2d_shape_16 = Constant <value = int64[2] {8, 16}> ()\n  dh2d = Reshape (dh, ln2d_shape_16)\n")
    model = onnx.parser.parse_model(text)
    # ORT's names for the gradient buffers (the analysis tells parameters by them); the parser takes no dots.
    rename = {f"{w}_GRADBUF": f"{w}_grad.accumulation.buffer" for w in ("w1", "w2")}
    for v in model.graph.input:
        v.name = rename.get(v.name, v.name)
    for n in model.graph.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
    return model


def _run_mlp(model: onnx.ModelProto) -> list[np.ndarray]:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((2, 4, 8)), "gamma": rng.standard_normal(8), "beta": rng.standard_normal(8),
             "w1": rng.standard_normal((16, 8)), "b1": rng.standard_normal(16), "w2": rng.standard_normal((8, 16)),
             "w1_grad.accumulation.buffer": np.zeros((16, 8)), "w2_grad.accumulation.buffer": np.zeros((8, 16)), "loss_grad": np.array(1.0)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    feeds["lazy_reset_grad"] = np.array(True)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out = sess.run(["dx"], feeds)
    return out + [feeds["w1_grad.accumulation.buffer"]]   # the accumulator writes the weight gradient into its buffer


def test_linear_outputs_and_weight_views_rebuilt_from_kept_inputs():
    from onnxcomp.passes.transformer import LinearRecomputePass

    model = _mlp()
    result = LinearRecomputePass(min_bytes=0).run(model)
    rebuilt = {r["tensor"] for r in result.records}
    assert {"h", "w1t"} <= rebuilt          # the GELU input and the transposed weight ORT keeps for dX
    assert "ln" not in rebuilt and "x" not in rebuilt     # not linear outputs: kept (the chain starts there)
    g = result.model.graph
    producer = {o: n for n in g.node for o in n.output}
    gelu_grad = next(n for n in g.node if n.op_type == "GeluGrad")
    assert gelu_grad.input[1] != "h" and producer[gelu_grad.input[1]].op_type == "Add"
    clone_mm = producer[[i for i in producer[gelu_grad.input[1]].input if i != "b1"][0]]
    assert clone_mm.op_type == "MatMul"
    # The clones wait for backward: the first cloned op reads its first input through a gate on a gradient.
    assert any("gate" in i or "gated" in i for n in g.node if "__recompute" in n.name for i in n.input)
    for got, want in zip(_run_mlp(result.model), _run_mlp(model)):
        np.testing.assert_array_equal(got, want)


def test_linear_recompute_leaves_non_linear_stashes_alone():
    from onnxcomp.passes.transformer import LinearRecomputePass

    result = LinearRecomputePass(min_bytes=0).run(_mlp())
    reasons = {s.name: s.reason for s in result.skipped}
    assert "not a MatMul" in reasons["x"]
    assert "linear layers' float outputs only" in reasons.get("mean", "linear layers' float outputs only") or \
        "not a MatMul" in reasons["mean"]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("chunks", [2, 3])
def test_chunked_dropout_draws_per_chunk(chunks):
    from onnxcomp.passes.chunk_attention import ChunkedAttentionForwardPass

    model = onnx.parser.parse_model(FORWARD)
    result = ChunkedAttentionForwardPass(chunks=chunks, min_bytes=0, chunk_dropout_bytes=0).run(model)
    (rec,) = result.records
    assert not rec["exact"] and rec["mask_drawn_from"] == "a Dropout per chunk"
    g = result.model.graph
    assert sum(n.op_type == "Dropout" for n in g.node) == rec["chunks"] == min(chunks, H)
    assert not any(n.op_type == "ConstantOfShape" for n in g.node)    # no whole-map draw
    y, keep = _run_seeded(result.model, ["y", "keep"])
    # Each chunk drew its own mask; y is the attention with that mask, up to rounding.
    f = _feeds()
    scores = np.where(f["causal"], (f["q"] @ f["kt"]) * np.float32(0.5), np.float32(-1e9))
    ratio = float(next(n for n in model.graph.node if n.output[0] == "ratio").attribute[0].t.float_data[0]) \
        if any(n.output[0] == "ratio" for n in model.graph.node) else None
    keep_p = 1.0 - (ratio if ratio is not None else 0.25)
    want = (_softmax(scores) * keep / np.float32(keep_p)) @ f["v"]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    assert keep.shape == (B, H, T, T) and 0.0 < keep.mean() < 1.0
    # Not the unchunked draw (other random numbers), although ORT's generator is seeded alike.
    (keep_whole,) = _run_seeded(model, ["keep"])
    assert not np.array_equal(keep, keep_whole)


def test_chunked_dropout_only_above_its_size():
    from onnxcomp.passes.chunk_attention import ChunkedAttentionForwardPass

    t2 = B * H * T * T * 4
    model = onnx.parser.parse_model(FORWARD)
    (rec,) = ChunkedAttentionForwardPass(chunks=2, min_bytes=0, chunk_dropout_bytes=t2 + 1).run(model).records
    assert rec["exact"] and rec["mask_drawn_from"] == "float32 zeros"
    with pytest.raises(ValueError):
        ChunkedAttentionForwardPass(chunk_dropout_bytes=-1)


def test_lossy_policies_chunk_the_dropout_and_exact_ones_do_not():
    from onnxcomp.passes import POLICIES
    from onnxcomp.passes.chunk_attention import ChunkedAttentionForwardPass

    def forward_step(name):
        return next(s for s in POLICIES[name].steps if s.make is ChunkedAttentionForwardPass)

    assert forward_step("dpr-fp8").fixed.get("chunk_dropout_bytes") is not None
    for exact in ("lossless", "recompute"):
        assert forward_step(exact).fixed.get("chunk_dropout_bytes") is None
