"""RecomputePass, AttentionDropoutRecomputePass and SplitWeightPass on onnx-ir, on small hand-written training
graphs (tests/graphs.py): what they clone, how the clones wait for backward, what they remove. Fast: onnx.parser
graphs, no torch export; onnx's reference evaluator only for the eval-model split."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import pytest
from graphs import _CONV, conv_pool, parse, two_conv

from onnxcomp.analysis import analyze_model
from onnxcomp.custom_ops import contract
from onnxcomp.passes import AttentionDropoutRecomputePass, MaxPoolIndexPass, RecomputePass, SparsePass
from onnxcomp.passes.base import CLONE_MARK, OnnxcompPass, check_model, ungated_nodes
from onnxcomp.passes.split_weight import WeightSplit, split_forward_gemm, splits_of

# Conv -> BatchNorm (training mode, ORT's BatchNormInternal) -> Relu -> Conv: the BN output (ReluGrad) and
# the ReLU output (ConvGrad) are rebuilt from the Conv output, which BatchNormalizationGrad keeps anyway.
CONV_BN = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4] scale, float[4] bias, float[4] mean, float[4] var,
       float[4,4,3,3] w2, float[4,3,3,3] w1_buf, float[4,4,3,3] w2_buf, bool lazy_reset_grad, float loss_grad)
      => (bool w1_out, bool w2_out)
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  bn, rm, rv, sm, sis = com.microsoft.BatchNormInternal <epsilon=0.00001, momentum=0.9> (x, scale, bias, mean, var)
  y = Relu (bn)
  z = Conv <pads=[1,1,1,1]> (y, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dy, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dz, y, w2)
  dbn = com.microsoft.ReluGrad (dy, bn)
  dx, dscale, dbias = com.microsoft.BatchNormalizationGrad <epsilon=0.00001> (dbn, x, scale, sm, sis)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""

# Attention: Softmax -> Dropout -> MatMul(., V), with ORT's backward: dV = FusedMatMul(P_drop, dO, transA=1)
# reads the dropped-out probabilities; DropoutGrad keeps the mask and SoftmaxGrad the softmax output anyway.
ATTENTION = """
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,4,8] q, float[2,8,4] kt, float[2,4,8] w2, float ratio, bool training, float[2,4,8] w2_buf,
       bool lazy_reset_grad, float loss_grad) => (bool w2_out, float[2,4,4] dscores)
{
  scores = MatMul (q, kt)
  s = Softmax <axis=-1> (scores)
  d, mask = Dropout (s, ratio, training)
  o = MatMul (d, w2)
  loss = ReduceSum <keepdims=0> (o)
  o_shape = Shape (o)
  do = Expand (loss_grad, o_shape)
  w2_grad = com.microsoft.FusedMatMul <transA=1> (d, do)
  dd = com.microsoft.FusedMatMul <transB=1> (do, w2)
  ds = com.microsoft.DropoutGrad (dd, mask, ratio)
  dscores = com.microsoft.SoftmaxGrad_13 <axis=-1> (ds, s)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
}
"""


def _made(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output if o}


def _upstream(model: onnx.ModelProto, tensor: str) -> set[str]:
    made, seen, todo = _made(model), set(), [tensor]
    while todo:
        t = todo.pop()
        if t not in seen:
            seen.add(t)
            todo += [i for i in made[t].input if i] if t in made else []
    return seen


def _reader(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op_type)


def test_passes_are_onnx_ir_passes() -> None:
    assert issubclass(RecomputePass, OnnxcompPass) and issubclass(AttentionDropoutRecomputePass, OnnxcompPass)


def test_batchnorm_clone_reads_gated_input_and_scratch_running_statistics() -> None:
    result = RecomputePass(min_bytes=0).run(parse(CONV_BN))
    out = result.model
    check_model(out, "recompute")
    by_tensor = {r.subject: r for r in result.records}
    assert by_tensor["y"]["cloned_ops"] == ["BatchNormInternal", "Relu"] and by_tensor["y"]["inputs_kept"] == ["x"]
    assert by_tensor["bn"]["cloned_ops"] == [] and by_tensor["bn"]["reused"] == ["bn"]   # ReluGrad reuses it
    clone = next(n for n in out.graph.node if n.op_type == "BatchNormInternal" and CLONE_MARK in n.name)
    relu_grad, conv_grad = _reader(out, "ReluGrad"), next(n for n in out.graph.node if n.name == "ConvGrad_7")
    assert relu_grad.input[1] == clone.output[0] and _made(out)[conv_grad.input[1]].input[0] == clone.output[0]
    # The first input waits for the reader's dY; the running statistics are fresh copies (the kernel writes
    # into them): the forward BatchNorm alone updates the real ones.
    assert clone.input[0] != "x" and {"x", "dz"} <= _upstream(out, clone.input[0])
    for k, stat in ((3, "mean"), (4, "var")):
        copy = _made(out)[clone.input[k]]
        assert copy.op_type == "Add" and copy.input[0] == stat and "dz" in _upstream(out, copy.input[1])
    nodes = list(out.graph.node)
    assert nodes.index(clone) < nodes.index(conv_grad) and not ungated_nodes(nodes, analyze_model(out).boundary)
    assert {"y", "bn"}.isdisjoint(s.name for s in analyze_model(out).stashed)


def test_maxpool_indices_rebuilt_and_the_forward_ones_left_out() -> None:
    result = RecomputePass(min_bytes=0).run(conv_pool())
    out = result.model
    check_model(out, "recompute")
    assert "idx" in {r.subject for r in result.records}
    pool, clone = (n for n in out.graph.node if n.op_type == "MaxPool")
    assert list(pool.output) == ["p"]               # nothing reads the forward indices any more: not made
    pool_grad = _reader(out, "MaxPoolGrad")
    assert pool_grad.input[1] == clone.output[1] and "dp" in _upstream(out, clone.input[0])


# replace_encoded takes PyOp encodings (a codec decoder's records); the native MaxPool form is left alone, as the
# native sign bits are.
@pytest.mark.parametrize("encode", [MaxPoolIndexPass(native=False), SparsePass(min_bytes=0)],
                         ids=["maxpool_index", "sparse"])
def test_replace_encoded_removes_encoder_decoder_anchors_and_trigger(encode) -> None:  # noqa: ANN001
    encoded = encode.run(conv_pool() if isinstance(encode, MaxPoolIndexPass) else two_conv()).model
    (decoder,) = [n for n in encoded.graph.node if contract.is_decoder(n.domain, n.op_type)]
    (encoder,) = [n for n in encoded.graph.node if contract.is_encoder(n.domain, n.op_type)]
    result = RecomputePass(replace_encoded=True).run(encoded)
    out = result.model
    check_model(out, "recompute")
    (rec,) = [r for r in result.records if "replaced_encoding" in r.detail]
    assert rec["tensor"] == encoder.input[0] and rec["replaced_payload_bytes"] > 0
    assert not [n for n in out.graph.node if contract.codec_op(n.domain, n.op_type)]
    # The anchored views and the decoder's trigger chain are gone with them; every input still exists.
    names = {o for n in out.graph.node for o in n.output}
    assert encoder.output[-1] not in {i for n in out.graph.node for i in n.input}
    assert decoder.input[-1] not in names and _made(encoded)[decoder.input[-1]].input[0] not in names
    sources = names | {i.name for i in out.graph.input} | {i.name for i in out.graph.initializer}
    assert all(i in sources for n in out.graph.node for i in n.input if i)


def test_attention_dropout_rebuilt_as_dropoutgrad_gated_on_dy() -> None:
    result = AttentionDropoutRecomputePass(min_bytes=0).run(parse(ATTENTION))
    out = result.model
    check_model(out, "recompute_attention_dropout")
    (rec,) = result.records
    assert rec.kind == "recomputed" and rec.subject == "d" and rec["shape"] == [2, 4, 4]
    reader = next(n for n in out.graph.node if n.op_type == "FusedMatMul" and "do" in n.input[1:])
    rebuilt = _made(out)[reader.input[0]]
    assert rebuilt.op_type == "DropoutGrad" and rebuilt.domain == "com.microsoft"
    assert rebuilt.input[:2] == ["s", "mask"] and rebuilt.input[3] == "training"
    assert rebuilt.input[2] != "ratio" and {"ratio", "do"} <= _upstream(out, rebuilt.input[2])   # the gated ratio
    nodes = list(out.graph.node)
    assert nodes.index(rebuilt) == nodes.index(reader) - 1
    assert "d" not in {s.name for s in analyze_model(out).stashed}
    assert not AttentionDropoutRecomputePass(min_bytes=1 << 20).run(parse(ATTENTION)).modified


# The eval model's fully connected layer: Y = Gemm(X, W, b, transB=1) -> Relu.
EVAL_FC = """
<ir_version: 8, opset_import: ["" : 17]>
eval (float[2,16] x, float[6,16] w, float[6] b) => (float[2,6] out)
{
  y = Gemm <transB=1> (x, w, b)
  out = Relu (y)
}
"""


def test_eval_model_split_reads_the_blocks_and_computes_the_same() -> None:
    from onnx.reference import ReferenceEvaluator

    original = onnx.parser.parse_model(EVAL_FC)
    split = WeightSplit("w", ("w.part0", "w.part1"), (0, 4, 6), (6, 16))
    model = ir.serde.deserialize_model(original)
    assert split_forward_gemm(model.graph, split)
    assert not split_forward_gemm(model.graph, split)           # no Gemm on "w" any more
    out = ir.serde.serialize_model(model)
    check_model(out, "split")
    assert [i.name for i in out.graph.input] == ["x", "w.part0", "w.part1", "b"]
    assert [n.op_type for n in out.graph.node] == ["Slice", "Gemm", "Slice", "Gemm", "Concat", "Relu"]
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 16), (6, 16), (6,)))
    want = ReferenceEvaluator(original).run(None, {"x": x, "w": w, "b": b})[0]
    got = ReferenceEvaluator(out).run(None, {"x": x, "w.part0": w[:4], "w.part1": w[4:], "b": b})[0]
    np.testing.assert_array_equal(got, want)
    assert splits_of(out) == []     # the metadata is the caller's (record_splits), as for the training graph


# A dense-block step: c = Concat(x, g) with g = Conv(x) the new features; the next conv reads c (ConvGrad keeps
# it), ConvGrad of g's conv keeps x. c is rebuilt from x (kept anyway) and g (a third of c, kept alive).
DENSE = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[2,4,3,3] w2, float[3,6,3,3] w3, float[4,3,3,3] w1_buf,
       float[2,4,3,3] w2_buf, float[3,6,3,3] w3_buf, bool lazy_reset_grad, float loss_grad)
      => (bool w1_out, bool w2_out, bool w3_out)
      <float[2,6,8,8] c, float[2,6,8,8] dc>
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  g = Conv <pads=[1,1,1,1]> (x, w2)
  c, lengths = com.microsoft.ConcatTraining <axis=1> (x, g)
  z = Conv <pads=[1,1,1,1]> (c, w3)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dc, w3_grad, db3 = com.microsoft.ConvGrad <{_CONV}> (dz, c, w3)
  dx1, dg = com.microsoft.SplitTraining <axis=1> (dc, lengths)
  dx2, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dg, x, w2)
  dx = Add (dx1, dx2)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
  w3_out = com.microsoft.InPlaceAccumulatorV2 (w3_buf, w3_grad, lazy_reset_grad)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""


def _gradients(model: onnx.ModelProto) -> list[np.ndarray]:
    """The three weight gradients of DENSE-like graphs, computed by ORT (training ops are CPU kernels)."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for name in ("w1_grad", "w2_grad", "w3_grad"):
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    rng = np.random.default_rng(0)
    feeds = {i.name: (rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                      if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT else np.array(True))
             for i in m.graph.input}
    feeds["loss_grad"] = np.array(1.0, dtype=np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["w1_grad", "w2_grad", "w3_grad"], feeds)


def test_concat_rebuilt_from_a_kept_stash_and_its_new_piece_kept_alive() -> None:
    model = parse(DENSE)
    skipped = RecomputePass(tensors=["c"]).run(model)
    assert not skipped.records and "Conv" in skipped.skipped[0].reason   # g's Conv is not cloned by default
    result = RecomputePass(tensors=["c"], extend_fraction=0.5).run(model)
    (rec,) = result.records
    assert rec["cloned_ops"] == ["ConcatTraining"] and rec["inputs_kept"] == ["x"]
    assert rec["inputs_extended"] == ["g"]
    out = result.model
    check_model(out, "recompute")
    assert "c" not in {s.name for s in analyze_model(out).stashed}
    assert not ungated_nodes(list(out.graph.node), analyze_model(out).boundary)
    # A copy: the weight gradients are bit for bit those of the original graph.
    for before, after in zip(_gradients(model), _gradients(out)):
        assert np.array_equal(before, after)
    # g is a third of c's bytes: a smaller fraction keeps it from being extended.
    assert not RecomputePass(tensors=["c"], extend_fraction=0.3).run(model).records


def test_extend_fraction_is_checked() -> None:
    with pytest.raises(Exception, match="extend_fraction"):
        RecomputePass(extend_fraction=1.0)


def test_a_clone_read_for_its_indices_only_releases_its_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recomputed MaxPool is read for its indices only: ORT would hold its values, read by nothing, to the
    end of the step. Above the size threshold its indices wait for the values through a gate instead (same
    values, the unread buffer freed right behind the clone); below it (per-channel statistics) nothing changes."""
    from onnxcomp.analysis.training_graph import analyze_model
    from onnxcomp.passes import recompute

    small = RecomputePass(min_bytes=0).run(conv_pool()).model
    clone = [n for n in small.graph.node if n.op_type == "MaxPool"][1]
    assert analyze_model(small).unread(clone.output[0])        # the test graph's pool is below the threshold
    monkeypatch.setattr(recompute, "_RELEASE_BYTES", 0)
    out = RecomputePass(min_bytes=0).run(conv_pool()).model
    check_model(out, "recompute")
    analysis = analyze_model(out)
    clone = [n for n in out.graph.node if n.op_type == "MaxPool"][1]
    assert not analysis.unread(clone.output[0])
    pool_grad = _reader(out, "MaxPoolGrad")
    assert pool_grad.input[1] != clone.output[1] and clone.output[1] in _upstream(out, pool_grad.input[1])
