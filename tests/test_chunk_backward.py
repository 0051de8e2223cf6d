"""ChunkedBackwardPass on small hand-written training graphs (onnx.parser, in the shape ORT's gradient builder
gives them): which regions it finds and refuses, and that the chunked gradients equal the unchunked ones up
to float rounding when ORT runs both."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.analysis import analyze_model
from onnxcomp.analysis.execution_order import ORDERS, in_run_order
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import ChunkedBackwardPass, ChunkedStemBackwardPass, chunkable_regions
from onnxcomp.passes.base import check_model
from onnxcomp.passes.chunk_backward import PREFIX, rewrite_region

_CONV = 'pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1, kernel_shape=[3,3]'
_POOL = 'kernel_shape=[2,2], strides=[2,2], pads=[0,0,0,0]'
_HEAD = '<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>'

# Conv -> BatchNorm -> Relu -> Conv -> ReduceSum. The first layer's backward region: ConvGrad (dX) ->
# ReluGrad -> BatchNormalizationGrad -> weight-only ConvGrad; the BN couples the batch by two sums.
BN_STEM = f"""
{_HEAD}
train (float[4,3,8,8] input, float[6,3,3,3] w1, float[6] gamma, float[6] beta, float[6] run_mean,
       float[6] run_var, float[5,6,3,3] w2, float loss_grad) => (float loss, float[6,3,3,3] w1_grad,
       float[6] gamma_grad, float[6] beta_grad, float[5,6,3,3] w2_grad)
{{
  x = Conv <{_CONV}> (input, w1)
  bn, rm, rv, smean, sinv = com.microsoft.BatchNormInternal <epsilon=1e-5, momentum=0.9> (x, gamma, beta, run_mean, run_var)
  r = Relu (bn)
  z = Conv <pads=[1,1,1,1]> (r, w2)
  zz = Mul (z, z)
  loss = ReduceSum <keepdims=0> (zz)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  gz = Mul (z, g2)
  dr, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (gz, r, w2)
  dbn = com.microsoft.ReluGrad (dr, bn)
  dx, gamma_grad, beta_grad = com.microsoft.BatchNormalizationGrad <epsilon=1e-5> (dbn, x, gamma, smean, sinv)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
}}
"""

# BN-free: Conv -> Relu -> MaxPool -> Conv -> Relu -> squared sum. Region: ReluGrad -> ConvGrad (dX) ->
# MaxPoolGrad (flat NCHW indices: rebased per chunk) -> ReluGrad -> weight-only ConvGrad.
CONV_CHAIN = f"""
{_HEAD}
train (float[5,3,8,8] input, float[4,3,3,3] w1, float[6,4,3,3] w2, float loss_grad)
      => (float loss, float[4,3,3,3] w1_grad, float[6,4,3,3] w2_grad)
{{
  x1 = Conv <pads=[1,1,1,1]> (input, w1)
  y1 = Relu (x1)
  p, idx = MaxPool <{_POOL}> (y1)
  x2 = Conv <pads=[1,1,1,1]> (p, w2)
  y2 = Relu (x2)
  yy = Mul (y2, y2)
  loss = ReduceSum <keepdims=0> (yy)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  gy = Mul (y2, g2)
  dx2 = com.microsoft.ReluGrad (gy, x2)
  dp, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dx2, p, w2)
  dy1 = MaxPoolGrad <{_POOL}> (dp, idx)
  dx1 = com.microsoft.ReluGrad (dy1, x1)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx1, input, w1)
}}
"""

# Softmax across the batch axis: its gradient couples every sample (not through a few sums): the first
# layer's backward has nothing it could chunk.
BATCH_SOFTMAX = f"""
{_HEAD}
train (float[4,3,8,8] input, float[4,3,3,3] w1, float loss_grad) => (float loss, float[4,3,3,3] w1_grad)
{{
  x = Conv <{_CONV}> (input, w1)
  s = Softmax <axis=0> (x)
  ss = Mul (s, s)
  loss = ReduceSum <keepdims=0> (ss)
  two = Constant <value = float {{2.0}}> ()
  g2 = Mul (loss_grad, two)
  ds = Mul (s, g2)
  dx = com.microsoft.SoftmaxGrad_13 <axis=0> (ds, s)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
}}
"""


def _parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
        if node.output[0] == "dinput":
            node.output[0] = ""          # the first layer: ORT's gradient builder leaves dX out
    # ORT's training graphs carry MaxPoolGrad's output shape (ONNX has no shape rule for it).
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("dy1", onnx.TensorProto.FLOAT, [5, 4, 8, 8]))
    return model


def _ops(model: onnx.ModelProto, op: str, ours: bool = True) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op and n.name.startswith(PREFIX) == ours]


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    for name in ("run_var", "gamma"):
        if name in feeds:
            feeds[name] = np.abs(feeds[name]) + 0.5
    feeds["loss_grad"] = np.array(1.0, dtype=np.float32)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], order: str = "priority") -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.execution_order = ort.ExecutionOrder.PRIORITY_BASED if order == "priority" else ort.ExecutionOrder.DEFAULT
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


def test_finds_the_bn_region_and_its_lengths() -> None:
    model = _parse(BN_STEM)
    regions = chunkable_regions(model, predict=False)
    longest = regions[-1]
    assert [n.split("_")[0] for n in longest.nodes] == ["ConvGrad", "ReluGrad", "BatchNormalizationGrad", "ConvGrad"]
    assert longest.batchnorm == "BatchNormalizationGrad_11" and longest.grad_input == "gz" and longest.batch == 4
    assert not longest.exact
    # The 2-op region [BN, ConvGrad] is not offered: the ReluGrad above it comes along for free.
    assert all(r.op_types[0] != "BatchNormalizationGrad" for r in regions)
    # The BN input is rebuilt from the image only where the BN sits right above the first-layer ConvGrad.
    assert all(r.recomputed_input == "x" for r in regions)


def test_finds_a_bn_free_chain_through_a_max_pool() -> None:
    (*_, longest) = chunkable_regions(_parse(CONV_CHAIN), predict=False)
    assert longest.op_types == ("ReluGrad", "ConvGrad", "MaxPoolGrad", "ReluGrad", "ConvGrad")
    assert longest.batchnorm is None and longest.grad_input == "gy"


def test_refuses_a_batch_coupling_that_is_not_a_sum() -> None:
    model = _parse(BATCH_SOFTMAX)
    assert chunkable_regions(model, predict=False) == []
    result = ChunkedBackwardPass(force=True).run(model)
    assert not result.records and not result.modified
    (skip,) = result.skipped
    assert "nothing to chunk" in skip.reason and "SoftmaxGrad_13 is not batch-separable" in skip.reason


@pytest.mark.parametrize("graph,chunks", [(BN_STEM, 2), (BN_STEM, 3), (CONV_CHAIN, 2), (CONV_CHAIN, 3)])
def test_chunked_gradients_equal_unchunked_up_to_rounding(graph: str, chunks: int) -> None:
    model = _parse(graph)
    result = ChunkedBackwardPass(chunks=chunks, force=True).run(model)
    (rec,) = result.records
    assert rec["chunks"] == chunks and rec["exact"] is False
    out = result.model
    check_model(out, "chunk_backward test")
    n_ops = len(rec["nodes"])
    assert not any(n.name in rec["nodes"] for n in out.graph.node)          # the region is gone ...
    assert len(_ops(out, "ConvGrad")) >= chunks                              # ... replaced chunk by chunk
    feeds = _feeds(model)
    for order in ORDERS:
        base, new = _run(model, feeds, order), _run(out, feeds, order)
        assert new["loss"] == base["loss"]                                   # forward untouched
        for name in base:
            scale = max(1.0, float(np.abs(base[name]).max()))
            np.testing.assert_allclose(new[name], base[name], rtol=1e-5, atol=1e-6 * scale, err_msg=name)
    assert n_ops >= 4


def test_a_wrong_index_rebase_is_caught() -> None:
    """The comparison above can fail: MaxPoolGrad chunks that keep the absolute indices scatter out of range
    or into the wrong sample."""
    model = _parse(CONV_CHAIN)
    out = ChunkedBackwardPass(chunks=2, force=True).run(model).model
    sub = next(n for n in out.graph.node if n.op_type == "Sub" and "indices_rebased" in n.output[0])
    offset = next(i for i in out.graph.initializer if i.name == sub.input[1])
    offset.CopyFrom(onnx.numpy_helper.from_array(np.array(0, dtype=np.int64), offset.name))
    feeds = _feeds(model)
    try:
        new = _run(out, feeds)
    except Exception:       # ORT refuses an index out of range: caught as well
        return
    base = _run(model, feeds)
    assert not np.allclose(new["w1_grad"], base["w1_grad"], rtol=1e-3)


@pytest.mark.parametrize("order", ORDERS)
def test_one_chunk_alive_at_a_time(order: str) -> None:
    """Under both ORT orders a chunk starts only once the previous one is done: the gates keep them apart.
    (On this tiny graph the stashes the region keeps until its last chunk outweigh the saving; the planner
    would refuse it, see the next test.)"""
    model = _parse(CONV_CHAIN)
    out = ChunkedBackwardPass(chunks=5, force=True).run(model).model
    ran = in_run_order(out, order)
    # Every chunk's first slice of the region's input gradient runs after the previous chunk's ConvGrads.
    names = [n.name for n in ran.graph.node]
    slices = [i for i, n in enumerate(ran.graph.node) if n.op_type == "Slice" and n.input[0] == "gy"]
    convs = [i for i, n in enumerate(ran.graph.node) if n.op_type == "ConvGrad" and n.name.startswith(PREFIX)]
    assert len(slices) == 5 and len(convs) == 10, names
    for k in range(1, 5):
        assert max(convs[2 * k - 2: 2 * k]) < slices[k]


def test_planner_picks_a_region_and_selection_by_name() -> None:
    model = _parse(CONV_CHAIN)
    regions = chunkable_regions(model, chunks=(2, 5))
    assert regions and all(set(r.predicted_peak) == {2, 5} for r in regions)
    assert all(r.predicted_peak_before is not None for r in regions)
    best = min(regions, key=lambda r: min(r.predicted_peak.values()))
    assert best.reduction(5) is not None
    # Selecting one region by name rewrites exactly that one (force: its count, no planner).
    short = regions[0]
    result = ChunkedBackwardPass(chunks=2, regions=[short.name]).run(model)
    for rec in result.records:
        assert rec["region"] == short.name
        assert rec["predicted_peak_after"] <= rec["predicted_peak_before"]
    with pytest.raises(OnnxcompError, match="no chunkable region"):
        ChunkedBackwardPass(regions=["nope"]).run(model)
    with pytest.raises(OnnxcompError, match="no chunkable region"):
        rewrite_region(model, "nope", 2)
    same = rewrite_region(model, short.name, 2)
    check_model(same, "rewrite_region")
    forced = ChunkedBackwardPass(chunks=2, regions=[short.name], force=True).run(model)
    assert [r["region"] for r in forced.records] == [short.name]
    assert [n.name for n in forced.model.graph.node] == [n.name for n in same.graph.node]


def test_stem_pass_is_the_restricted_case() -> None:
    model = _parse(BN_STEM)
    (rec,) = ChunkedStemBackwardPass(chunks=2, force=True).run(model).records
    assert rec["nodes"][-2:] == ["BatchNormalizationGrad_11", "ConvGrad_12"] and len(rec["nodes"]) == 3
    assert rec["dropped_stashes"] == ["x"] and rec["relu_grad"] == "ReluGrad_10"
    out = ChunkedStemBackwardPass(chunks=2, force=True).run(model).model
    assert "x" not in {s.name for s in analyze_model(out).stashed}
    # Two recomputed Convs per pass and chunk; the general pass also takes the ConvGrad above.
    assert len(_ops(out, "Conv")) == 4
    general = ChunkedBackwardPass(chunks=2, force=True).run(model)
    assert len(general.records[0]["nodes"]) == 4
    feeds = _feeds(model)
    base, new = _run(model, feeds), _run(out, feeds)
    for name in base:
        np.testing.assert_allclose(new[name], base[name], rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(base[name]).max())))


def test_forward_pass_untouched_after_encoders() -> None:
    """After native fp16 DPR (a forward Clip+Cast per stash, a gated Cast decode in backward) the region slices
    the decode's gated fp16 view; every forward node keeps its place (no encoder pulled into backward, where
    the fp32 tensor would have to live until then) and the gradients match."""
    from onnxcomp.passes import DprPass

    encoded = DprPass(min_bytes=0, native=True).run(_parse(CONV_CHAIN)).model
    out = ChunkedBackwardPass(chunks=2, force=True).run(encoded).model
    def forward(m: onnx.ModelProto) -> list[str]:
        nodes = list(m.graph.node)
        return [n.name for n in nodes[:[k for k, n in enumerate(nodes) if "loss" in n.output][0] + 1]]
    assert forward(out) == forward(encoded)
    made = {o: n for n in out.graph.node for o in n.output}
    sliced = [made[n.input[0]] for n in _ops(out, "Slice") if n.input[0] in made]
    assert any(p.op_type == "Reshape" and p.output[0].endswith("__fp16_gated") for p in sliced)
    feeds = _feeds(_parse(CONV_CHAIN))
    base, new = _run(encoded, feeds), _run(out, feeds)
    for name in base:
        np.testing.assert_allclose(new[name], base[name], rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(base[name]).max())))


def test_raw_stashes_false_leaves_them_to_the_encoders() -> None:
    """Ahead of DPR/SZ (policies), a region may not slice a stash as the forward pass left it: the encoder
    could not time its decoder behind a Slice. After the sign-bit pass the ReLU masks are decoded in
    backward, so the bottom region [ReluGrad, first-layer ConvGrad] is offered again."""
    from onnxcomp.passes import SignBitsPass

    model = _parse(CONV_CHAIN)
    assert ChunkedBackwardPass(chunks=2, force=True).run(model).records
    assert not ChunkedBackwardPass(chunks=2, force=True, raw_stashes=False).run(model).records
    masked = SignBitsPass(split_readers=True).run(model).model
    (rec,) = ChunkedBackwardPass(chunks=2, force=True, raw_stashes=False).run(masked).records
    assert [t.split("_")[0] for t in rec["nodes"]] == ["ReluGrad", "ConvGrad"]


def _readers_outside(model) -> list[str]:  # noqa: ANN001
    """Readers that values still list but that are no longer in the graph (a stale use/def link)."""
    nodes = set(model.graph)
    values = list(model.graph.inputs) + list(model.graph.initializers.values()) + \
        [v for n in model.graph for v in n.outputs]
    return [f"{v.name} <- {u.node.name}" for v in values for u in v.uses() if u.node not in nodes]


def test_on_onnx_ir_the_region_is_replaced_through_use_def_links() -> None:
    """In a transform the pass edits the onnx-ir model in place: the gradients' readers (here graph outputs)
    read the running sums, no value keeps a removed reader, and a graph with nothing to chunk is reported
    unmodified."""
    import onnx_ir as ir

    from onnxcomp.passes.base import run_passes

    model = ir.serde.deserialize_model(_parse(CONV_CHAIN))
    region = {n.name for n in model.graph if n.op_type in ("ConvGrad", "ReluGrad", "MaxPoolGrad")}
    log = run_passes(model, [ChunkedBackwardPass(chunks=2, force=True)])
    assert log.modified_by == ["chunk_backward"] and [r.kind for r in log.records] == ["chunked"]
    assert not region & {n.name for n in model.graph}
    assert _readers_outside(model) == []
    outputs = {v.name: v for v in model.graph.outputs}
    for grad in ("w1_grad", "w2_grad"):
        producer = outputs[grad].producer()
        assert producer.op_type == "Identity" and producer.name.startswith(PREFIX)
        assert producer.inputs[0].producer().op_type == "Add"           # the sum over the two chunks
    untouched = ir.serde.deserialize_model(_parse(BATCH_SOFTMAX))
    before = [n.name for n in untouched.graph]
    log = run_passes(untouched, [ChunkedBackwardPass(force=True)])
    assert log.modified_by == [] and [n.name for n in untouched.graph] == before


def test_a_refused_trial_leaves_the_graph_as_it_was() -> None:
    """The planner's trials run on clones: on this tiny graph every trial keeps more stashes alive than it
    saves (see test_one_chunk_alive_at_a_time), so the model is not touched and says so."""
    import onnx_ir as ir

    from onnxcomp.passes.base import run_passes

    model = ir.serde.deserialize_model(_parse(CONV_CHAIN))
    before = [(n.op_type, n.name, tuple(v.name for v in n.inputs if v is not None)) for n in model.graph]
    log = run_passes(model, [ChunkedBackwardPass(chunks=(2, 5))])
    assert log.modified_by == [] and not log.records
    assert "would not lower the predicted bytes" in log.skipped[-1]["reason"]
    assert [(n.op_type, n.name, tuple(v.name for v in n.inputs if v is not None)) for n in model.graph] == before
    assert _readers_outside(model) == []


def _unfold_centring(model: onnx.ModelProto) -> onnx.ModelProto:
    """The region as it was emitted before the centring was folded into the recomputing Conv: each chunk Conv
    with a (negated-mean) bias becomes ``Sub(Conv(img, W), μ)``, μ the BN's saved mean as [1, C, 1, 1]."""
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    made = {o: n for n in out.graph.node for o in n.output}
    bn = next(n for n in _parse(BN_STEM).graph.node if n.op_type == "BatchNormalizationGrad")
    nodes = []
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, -1, 1, 1], np.int64), "t_c11"))
    nodes.append(helper.make_node("Reshape", [bn.input[3], "t_c11"], ["t_mean4"], name="t_mean4"))
    for n in out.graph.node:
        if n.op_type == "Conv" and n.name.startswith(PREFIX) and len(n.input) == 3:
            assert made[n.input[2]].op_type == "Neg"
            plain = helper.make_node("Conv", list(n.input[:2]), [n.output[0] + "_raw"], name=n.name + "_raw")
            plain.attribute.extend(n.attribute)
            nodes += [plain, helper.make_node("Sub", [plain.output[0], "t_mean4"], [n.output[0]], name=n.name + "_sub")]
        else:
            nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


@pytest.mark.parametrize("chunks", [2, 3])
def test_recomputed_bn_input_is_centred_by_the_conv_bias_bit_for_bit(chunks: int) -> None:
    """Where the stem's BN input is recomputed by a bias-free Conv, x − μ comes out of that Conv with −μ as its
    bias (no full-size Conv output beside a Sub's: one fresh chunk buffer fewer per chunk and pass). The
    gradients are bit-identical to the Sub form ORT runs on the same graph otherwise."""
    model = _parse(BN_STEM)
    out = ChunkedStemBackwardPass(chunks=chunks, force=True).run(model).model
    check_model(out, "chunk_backward test")
    convs = _ops(out, "Conv")
    assert len(convs) == 2 * chunks and all(len(n.input) == 3 for n in convs)
    assert not _ops(out, "Sub")                         # nothing centres x after the Conv any more
    reference = _unfold_centring(out)
    assert len(_ops(reference, "Sub")) == 2 * chunks
    feeds = _feeds(model)
    for seed in range(3):
        feeds = _feeds(model, seed)
        feeds["input"] *= np.float32(10.0 ** seed)      # offsets and magnitudes where rounding would show
        new, ref = _run(out, feeds), _run(reference, feeds)
        for name in ref:
            assert np.array_equal(new[name].view(np.uint32), ref[name].view(np.uint32)), name


def test_a_conv_with_its_own_bias_keeps_the_sub() -> None:
    """(Conv + b) − μ is not Conv + (b − μ) in float: a recomputing Conv that has a bias keeps the Sub."""
    text = BN_STEM.replace("float[6] gamma,", "float[6] b1, float[6] gamma,").replace(
        "x = Conv <{_CONV}> (input, w1)".format(_CONV=_CONV), f"x = Conv <{_CONV}> (input, w1, b1)")
    assert "(input, w1, b1)" in text
    model = _parse(text)
    (rec,) = ChunkedStemBackwardPass(chunks=2, force=True).run(model).records
    out = ChunkedStemBackwardPass(chunks=2, force=True).run(model).model
    convs = _ops(out, "Conv")
    assert len(convs) == 4 and all(n.input[2] == "b1" for n in convs)
    assert len([n for n in _ops(out, "Sub") if "x_centred" in n.output[0]]) == 4
    feeds = _feeds(model)
    base, new = _run(model, feeds), _run(out, feeds)
    for name in base:
        np.testing.assert_allclose(new[name], base[name], rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(base[name]).max())))
