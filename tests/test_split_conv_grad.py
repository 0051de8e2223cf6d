"""SplitConvGradPass: a ConvGrad with a large im2col workspace runs as input-channel blocks.

Unit: a hand-written training graph's second ConvGrad (4 input channels, 3x3, 8x8: a 2.3 KB workspace) split
into 2 and 4 blocks computes the same dX, dW, dB up to rounding, in the expected shape (slices of X and W,
ConvGrads in order, Concats); ConvGrads under the limit and grouped convs are left alone. Integration: the
wide ResNet's chunked input chain with its ConvGrads blocked trains like the original, and the planner's
predicted workspace falls with the block count (the quantity the pass exists for)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper
import onnx.parser
import onnx.shape_inference
import pytest

from onnxcomp.passes.split_conv_grad import SplitConvGradPass

_C3 = 'pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group={g}, kernel_shape=[3,3]'


def _graph(group: int = 1) -> onnx.ModelProto:
    """Conv → ReLU → Conv (bias) → ReduceSum(· * r) and ORT's backward; the gradients are graph outputs."""
    c = _C3.format(g=1)
    c2 = _C3.format(g=group)
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[6,{4 // group},3,3] w2, float[6] b2, float[2,6,8,8] r,
       float loss_grad) => (float loss, float[2,3,8,8] dinput, float[4,3,3,3] w1_grad,
       float[6,{4 // group},3,3] w2_grad, float[6] b2_grad)
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  y = Relu (x)
  z = Conv <pads=[1,1,1,1], group={group}> (y, w2, b2)
  zr = Mul (z, r)
  loss = ReduceSum <keepdims=0> (zr)
  zr_shape = Shape (zr)
  dzr = Expand (loss_grad, zr_shape)
  dz = Mul (dzr, r)
  dy, w2_grad, b2_grad = com.microsoft.ConvGrad <{c2}> (dz, y, w2)
  dx = com.microsoft.ReluGrad (dy, x)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{c}> (dx, input, w1)
}}
"""
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(text))
    model.graph.value_info.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)
                                  for n, s in (("dz", [2, 6, 8, 8]), ("dy", [2, 4, 8, 8]), ("dx", [2, 4, 8, 8])))
    return model


def _run(model: onnx.ModelProto, group: int = 1) -> list[np.ndarray]:
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    feeds = {"input": rng.standard_normal((2, 3, 8, 8)), "w1": rng.standard_normal((4, 3, 3, 3)) * 0.3,
             "w2": rng.standard_normal((6, 4 // group, 3, 3)), "b2": rng.standard_normal(6),
             "r": rng.standard_normal((2, 6, 8, 8)), "loss_grad": np.array(1.0)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["loss", "dinput", "w1_grad", "w2_grad", "b2_grad"],
                    {k: v.astype(np.float32) for k, v in feeds.items()})


# w2's ConvGrad: 4 input channels * 9 * 64 pixels * 4 B = 9216 B; w1's: 3 * 9 * 64 * 4 = 6912 B.
@pytest.mark.parametrize(("limit", "blocks"), [(9216 // 2, 2), (9216 // 4, 4), (7000, 2)])
def test_blocks_compute_the_same_gradients(limit: int, blocks: int) -> None:
    result = SplitConvGradPass(limit).run(_graph())
    recs = {r["conv_grad"]: r for r in result.records}
    w2 = next(r for r in result.records if r["workspace_bytes"] == 9216)
    assert w2["input_channel_blocks"] == blocks and w2["block_workspace_bytes"] == 9216 // blocks
    # w1's ConvGrad (6912 B) is split only where it is above the limit
    assert (len(recs) == 2) == (6912 > limit)
    out = result.model
    grads = [n for n in out.graph.node if n.op_type == "ConvGrad" and n.output[1].startswith("w2_grad_cin/")]
    assert len(grads) == blocks
    # each block reads a slice of X (y) and of W; dB comes from the first block only
    assert all(n.input[1] != "y" and n.input[2] != "w2" for n in grads)
    assert sum(1 for n in grads if len(n.output) > 2 and n.output[2]) == 1
    concats = [n for n in out.graph.node if n.op_type == "Concat" and n.output[0] in ("dy", "w2_grad")]
    assert len(concats) == 2
    base, new = _run(_graph()), _run(out)
    for a, b in zip(base, new):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(a).max())))


def test_blocks_run_in_order() -> None:
    out = SplitConvGradPass(9216 // 4).run(_graph()).model
    grads = [n for n in out.graph.node if n.op_type == "ConvGrad" and n.output[1].startswith("w2_grad_cin/")]
    # block j's X slice reads a view gated on block j-1's dW (block 0's on dY): one block's workspace at a
    # time in either execution order
    for prev, nxt in zip(grads, grads[1:]):
        assert prev.output[1] in _upstream(out, nxt.input[1])
    assert "dz" in _upstream(out, grads[0].input[1])


def _upstream(model: onnx.ModelProto, value: str) -> set[str]:
    producers = {o: n for n in model.graph.node for o in n.output}
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in producers:
            stack.extend(producers[v].input)
    return seen


def test_leaves_small_and_grouped_convgrads() -> None:
    assert not SplitConvGradPass(1 << 20).run(_graph()).modified
    result = SplitConvGradPass(1000).run(_graph(group=2))
    assert any("grouped" in s.reason for s in result.skipped)
    assert [r["workspace_bytes"] for r in result.records] == [6912]        # only w1's (group 1)
    np.testing.assert_allclose(_run(result.model, group=2)[3], _run(_graph(group=2), group=2)[3], rtol=1e-5)


# ---------------------------------------------------------------------------------------------- integration
@pytest.fixture(scope="module")
def wrn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from conftest import artifacts_from_net
    from onnxcomp.models.suite import build_suite_model

    torch.manual_seed(0)
    net = build_suite_model("wide_resnet_s", num_classes=10, width=0.5)
    return artifacts_from_net(net, tmp_path_factory.mktemp("wrn_half"), batch=4, in_channels=3, height=16,
                              width=16)


def test_chunked_chain_with_blocked_convgrads_trains_like_the_original(wrn: Path, tmp_path: Path) -> None:
    from onnxcomp.passes.chunk_input_chain import ChunkedInputChainPass
    from onnxcomp.planner.predict import conv_grad_workspace
    from onnxcomp.analysis import analyze_model

    from test_chunk_input_chain import _train

    chained = ChunkedInputChainPass(chunks=4, layers=3).run(onnx.load(str(wrn / "training_model.onnx"))).model
    limit = 64 << 10
    result = SplitConvGradPass(limit).run(chained)
    assert len(result.records) >= 3
    a_before, a_after = analyze_model(chained), analyze_model(result.model)
    before = max(conv_grad_workspace(a_before, n) for n in chained.graph.node)
    after = max(conv_grad_workspace(a_after, n) for n in result.model.graph.node)
    # the largest workspace shrank; every blocked ConvGrad is within the limit (the others did not pay)
    assert before > after and all(r["block_workspace_bytes"] <= limit for r in result.records)
    path = tmp_path / "blocked.onnx"
    onnx.save(result.model, str(path))
    base_losses, base_grads, _ = _train(wrn, None, 2)
    losses, grads, _ = _train(wrn, path, 2)
    np.testing.assert_allclose(losses, base_losses, rtol=1e-4)
    for name, g in base_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-3, atol=1e-5 * max(1.0, np.abs(g).max()), err_msg=name)


# dx_by_conv (the ORT-defaults growth mode's variant): blocks make dW only, dX is one Conv over flipped weights
@pytest.mark.parametrize("limit", [9216 // 2, 9216 // 4, 7000])
def test_dx_by_conv_computes_the_same_gradients_without_dx_blocks(limit: int) -> None:
    result = SplitConvGradPass(limit, dx_by_conv=True).run(_graph())
    assert result.records and all(r["dx_by_conv"] for r in result.records
                                  if r["conv_grad"] != "" and r["workspace_bytes"] == 9216)
    out = result.model
    grads = [n for n in out.graph.node if n.op_type == "ConvGrad" and n.output[1].startswith("w2_grad_cin/")]
    assert len(grads) > 1
    # no block computes dX, no Concat rebuilds it: dy comes from one Conv reading dz and the flipped w2
    assert all(not n.output[0] for n in grads)
    dy = next(n for n in out.graph.node if "dy" in n.output)
    assert dy.op_type == "Conv" and dy.input[0] == "dz"
    assert not any(n.op_type == "Concat" and n.output[0] == "dy" for n in out.graph.node)
    base, new = _run(_graph()), _run(out)
    for a, b in zip(base, new):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(a).max())))


def test_dx_by_conv_splits_where_blocks_would_not_pay() -> None:
    # at 7000 B w1's ConvGrad (6912 B) stays whole either way; at 3000 B the default rule still splits both here,
    # so check the rule on shapes: a full-batch ConvGrad whose dX outweighs the workspace saved
    from onnxcomp.passes.split_conv_grad import blocks_that_pay

    assert blocks_that_pay((2, 6, 8, 8), (64, 4, 8, 8), (6, 4, 3, 3), True, 9216 // 2) == 0
    result = SplitConvGradPass(9216 // 2, dx_by_conv=True).run(_graph())
    assert any(r["workspace_bytes"] == 9216 for r in result.records)


# exact (the ORT-defaults growth mode prices it for --exact plans): blocks only where they probe bit-identical
def _one_convgrad(n: int, c: int, m: int, h: int) -> onnx.ModelProto:
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
g (float[{n},{m},{h},{h}] dz, float[{n},{c},{h},{h}] x, float[{m},{c},3,3] w)
  => (float[{n},{c},{h},{h}] dx, float[{m},{c},3,3] dw, float[{m}] db)
{{
  dx, dw, db = com.microsoft.ConvGrad <{_C3.format(g=1)}> (dz, x, w)
}}
"""
    return onnx.shape_inference.infer_shapes(onnx.parser.parse_model(text))


def _run_one(model: onnx.ModelProto, n: int, c: int, m: int, h: int, threads: int = 1) -> list[np.ndarray]:
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    feeds = {"dz": rng.standard_normal((n, m, h, h)), "x": rng.standard_normal((n, c, h, h)),
             "w": rng.standard_normal((m, c, 3, 3))}
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads       # MLAS's K slices depend on the thread count: the test fixes it
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(["dx", "dw", "db"], {k: v.astype(np.float32) for k, v in feeds.items()})


def test_exact_blocks_give_bit_identical_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxcomp.passes.split_conv_grad as scg

    # the probe's thread counts fixed (1 and 2, whatever this machine has), the comparison run at both
    monkeypatch.setattr(scg, "probe_thread_counts", lambda: (1, 2))
    scg.blocks_bit_identical.cache_clear()
    # 48 input channels, 16x16: a 432 KiB workspace; at half of it two blocks of 24 channels (dW's 216 columns per
    # block keep MLAS's K slices at 1 and 2 threads)
    n, c, m, h = 2, 48, 8, 16
    ws = c * 9 * h * h * 4
    result = SplitConvGradPass(ws // 2, exact=True).run(_one_convgrad(n, c, m, h))
    assert [(r["input_channel_blocks"], r["exact"]) for r in result.records] == [(2, True)]
    assert sum(1 for node in result.model.graph.node if node.op_type == "ConvGrad") == 2
    for threads in (1, 2):
        whole, blocks = (_run_one(g, n, c, m, h, threads) for g in (_one_convgrad(n, c, m, h), result.model))
        assert all(np.array_equal(a, b) for a, b in zip(whole, blocks))
    scg.blocks_bit_identical.cache_clear()


def test_exact_leaves_a_convgrad_whose_blocks_would_round_dw_otherwise() -> None:
    from onnxcomp.passes.split_conv_grad import blocks_bit_identical

    # one channel a block: 9 dW columns a block against 144 whole, so MLAS sums the 256 output pixels in one
    # 256-long slice instead of two of 128: dW differs in the last bits
    n, c, m, h = 2, 16, 8, 16
    attrs = ((1, 1, 1, 1), (1, 1), (1, 1), (3, 3), "NOTSET")
    assert not blocks_bit_identical((n, m, h, h), (n, c, h, h), (m, c, 3, 3), attrs, (True, True, True),
                                    tuple(range(c + 1)))
    split = SplitConvGradPass(1, dx_by_conv=False).run(_one_convgrad(n, c, m, h))     # 16 blocks: differs
    dw_whole, dw_blocks = _run_one(_one_convgrad(n, c, m, h), n, c, m, h)[1], _run_one(split.model, n, c, m, h)[1]
    assert not np.array_equal(dw_whole, dw_blocks)
    np.testing.assert_allclose(dw_blocks, dw_whole, rtol=1e-4, atol=1e-4)
    result = SplitConvGradPass(c * 9 * h * h * 4 // 16, exact=True).run(_one_convgrad(n, c, m, h))
    assert not result.modified and any("bit-identical" in s.reason for s in result.skipped)


def test_exact_and_dx_by_conv_exclude_each_other() -> None:
    from onnxcomp.errors import OnnxcompError

    with pytest.raises(OnnxcompError, match="exact"):
        SplitConvGradPass(1024, dx_by_conv=True, exact=True)


def test_exact_blocks_keep_a_lifted_dx_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reuse pass declares some ConvGrad outputs lifted ([N, C, H, W, 1]: same elements, another signature for
    ORT's reuse plan). The blocks and their Concat must be declared the same way: a 4-D Concat under the 5-D
    declaration is a shape conflict ORT merges leniently (and the measured set-up of wide_resnet_s's exact plan rose
    0.94 MiB with it)."""
    import onnxcomp.passes.split_conv_grad as scg

    monkeypatch.setattr(scg, "probe_thread_counts", lambda: (1, 2))
    scg.blocks_bit_identical.cache_clear()
    n, c, m, h = 2, 48, 8, 16
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
g (float[{n},{m},{h},{h}] dz, float[{n},{c},{h},{h}] x, float[{m},{c},3,3] w)
  => (float[{n},{c},{h},{h}] dx, float[{m},{c},3,3] dw, float[{m}] db)
<float[{n},{c},{h},{h},1] dxl, int64[4] s4>
{{
  dxl, dw, db = com.microsoft.ConvGrad <{_C3.format(g=1)}> (dz, x, w)
  s4 = Constant <value = int64[4] {{{n}, {c}, {h}, {h}}}> ()
  dx = Reshape (dxl, s4)
}}
"""
    model = onnx.parser.parse_model(text)
    result = SplitConvGradPass(c * 9 * h * h * 4 // 2, exact=True).run(model)
    assert [r["input_channel_blocks"] for r in result.records] == [2]
    out = result.model
    declared = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in out.graph.value_info}
    concat = next(node for node in out.graph.node if node.op_type == "Concat" and node.output[0] == "dxl")
    assert declared["dxl"] == [n, c, h, h, 1]
    assert all(declared[i] == [n, c // 2, h, h, 1] for i in concat.input)
    onnx.shape_inference.infer_shapes(out, strict_mode=True)     # no conflict between inferred and declared
    for threads in (1, 2):
        whole, blocks = (_run_one(g, n, c, m, h, threads) for g in (model, out))
        assert all(np.array_equal(a, b) for a, b in zip(whole, blocks))
    scg.blocks_bit_identical.cache_clear()


@pytest.mark.parametrize("trail", [1, 6])
def test_dx_by_conv_keeps_a_lifted_dx_declaration(trail: int) -> None:
    """The dX-by-Conv path under a lifted dX declaration ([N, C, H, W, 1...], the reuse pass's): the Conv is
    declared 4-D (what ORT infers for it) and a Reshape view carries the lifted declaration under dX's name. A Conv
    output declared lifted made ORT log "Error merging shape info" (stop-39 lossy wide_resnet_s, with 1 and 6
    trailing 1s): strict shape inference fails on it."""
    n, c, m, h = 2, 16, 8, 16
    ones = ",1" * trail
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
g (float[{n},{m},{h},{h}] dz, float[{n},{c},{h},{h}] x, float[{m},{c},3,3] w)
  => (float[{n},{c},{h},{h}] dx, float[{m},{c},3,3] dw, float[{m}] db)
<float[{n},{c},{h},{h}{ones}] dxl, int64[4] s4>
{{
  dxl, dw, db = com.microsoft.ConvGrad <{_C3.format(g=1)}> (dz, x, w)
  s4 = Constant <value = int64[4] {{{n}, {c}, {h}, {h}}}> ()
  dx = Reshape (dxl, s4)
}}
"""
    model = onnx.parser.parse_model(text)
    result = SplitConvGradPass(c * 9 * h * h * 4 // 2, dx_by_conv=True).run(model)
    assert [r["dx_by_conv"] for r in result.records] == [True]
    out = result.model
    declared = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in out.graph.value_info}
    conv = next(node for node in out.graph.node if node.op_type == "Conv")
    assert declared[conv.output[0]] == [n, c, h, h]
    view = next(node for node in out.graph.node if node.output[0] == "dxl")
    assert view.op_type == "Reshape" and view.input[0] == conv.output[0]
    assert declared["dxl"] == [n, c, h, h] + [1] * trail
    onnx.shape_inference.infer_shapes(out, strict_mode=True)     # no conflict between inferred and declared
    whole, split = (_run_one(g, n, c, m, h) for g in (model, out))
    for a, b in zip(whole, split):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
