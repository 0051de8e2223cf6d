"""Native MaxPool indices (passes/maxpool_index.py ``native``): the int64 argmax indices held as one uint8 in-window
code per index by standard ONNX ops (Mod, Sub, Gather; Cast, Gather, Add), no PyOp. Checked on hand-written
training graphs that ORT runs: the codes are the window offsets, the gradients equal the PyOp path's and the
untouched graph's bit for bit, and the decode does not compute in the indices' own shape (ORT's buffer reuse
would then chain the forward's int64 buffer to the backward's)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from graphs import CONV_POOL, parse
from test_native_bits import _feeds, _ours, _run

from onnxcomp.custom_ops import get_codec
from onnxcomp.passes import MaxPoolIndexPass
from onnxcomp.passes.base import check_model
from onnxcomp.passes.maxpool_index import native_pool_problem, pool_tables

GRADS = ("dinput", "w1_grad")
_POOL_2x2 = "kernel_shape=[2,2], strides=[2,2]"
_POOL_STEM = "kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]"   # the ResNet stem's: windows in the padding
_POOL_DILATED = "kernel_shape=[2,2], strides=[1,1], dilations=[2,2]"
_POOL_CEIL = "kernel_shape=[3,3], strides=[2,2], ceil_mode=1"
_POOL_4x4 = "kernel_shape=[4,4], strides=[4,4]"     # 16 taps: one uint8 code per index, unpacked


def _pool_graph(attrs: str) -> onnx.ModelProto:
    """CONV_POOL with the pool's attributes ``attrs`` on MaxPool and MaxPoolGrad, and dy's shape declared (ORT's
    MaxPoolGrad has no shape inference and takes its output shape from the graph), so ORT runs it."""
    text = CONV_POOL.replace("MaxPool <kernel_shape=[2,2], strides=[2,2]>", f"MaxPool <{attrs}>")
    text = text.replace("MaxPoolGrad (dp, idx)", f"MaxPoolGrad <{attrs}> (dp, idx)")
    model = parse(text)
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("dy", onnx.TensorProto.FLOAT, [2, 4, 8, 8]))
    return model


@pytest.mark.parametrize("attrs", [_POOL_2x2, _POOL_STEM, _POOL_DILATED, _POOL_4x4],
                         ids=["2x2", "stem-3x3-pad", "dilated", "4x4-unpacked"])
@pytest.mark.parametrize("order", ["default", "priority"])
def test_native_pool_codes_and_gradients_equal_the_pyop_path(attrs: str, order: str) -> None:
    model = _pool_graph(attrs)
    feeds = _feeds(model)
    feeds["input"][0, :, :4, :4] = 0.0     # ReLU zeros: windows with ties (ORT takes the first tap)
    native = MaxPoolIndexPass().run(model)
    pyop = MaxPoolIndexPass(native=False).run(model)
    check_model(native.model, "maxpool_index")
    (rec,) = native.records
    assert rec["native"] == "maxpool" and rec["codec"] == "maxpool_index" and not _ours(native.model)
    assert pyop.records[0].get("native") is None and _ours(pyop.model)
    payload = next(iter(rec["payload"]))
    got = _run(native.model, feeds, (*GRADS, payload, "idx"), order)
    ref = _run(pyop.model, feeds, GRADS, order)
    base = _run(model, feeds, GRADS, order)
    held, idx = got[-2], got[-1]
    origin, plane, _, decode = pool_tables(rec["params"])
    assert held.dtype == np.uint8 and rec["payload"][payload] == held.size
    if decode.size < 16:    # two 4-bit codes a byte, element 2k in the low nibble
        assert held.size == idx.size // 2
        codes = np.stack([held.reshape(-1) & 15, held.reshape(-1) >> 4], axis=1).reshape(idx.shape)
        if decode.size > 8:  # 4 bits an index: the PyOp codec's bit stream, byte for byte
            stream, _ = get_codec("maxpool_index").encode_cpu(idx, **rec["params"])
            assert np.array_equal(held.reshape(-1), stream)
    else:
        assert held.shape == idx.shape
        codes = held
    # Each index's tap (i·kw + j): index = plane + window origin + that tap's offset.
    assert int(codes.max()) < decode.size
    assert np.array_equal(plane + origin + decode[codes.astype(np.int64)], idx)
    for g, r, b in zip(got[:len(GRADS)], ref, base):
        assert g.dtype == np.float32 and np.array_equal(g.view(np.uint32), r.view(np.uint32))
        assert np.array_equal(g.view(np.uint32), b.view(np.uint32))


def test_native_pool_decode_does_not_take_the_index_shape() -> None:
    out = MaxPoolIndexPass().run(_pool_graph(_POOL_2x2)).model
    shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
              for vi in onnx.shape_inference.infer_shapes(out).graph.value_info}
    nodes = list(out.graph.node)
    grad = next(i for i, n in enumerate(nodes) if n.op_type == "MaxPoolGrad")
    decoder = next(i for i, n in enumerate(nodes) if n.output[0] == nodes[grad].input[1])
    assert nodes[decoder].op_type == "Reshape"          # a view: ORT aliases it, no buffer of its own
    # Every int64 tensor the decode computes is [N·C, OH·OW], not the forward indices' [N, C, OH, OW]:
    # ORT would hand it the encoder's freed buffer and hold that buffer across the step.
    made = [o for n in nodes[:decoder] if "__pool_" in n.name and n.op_type in ("Gather", "Add") for o in n.output]
    decode_side = [o for o in made if o.endswith(("_step", "_inplane_d", "_index_flat"))]
    backward = next(i for i, n in enumerate(nodes) if n.op_type == "Expand")
    ints = {vi.name for vi in onnx.shape_inference.infer_shapes(out).graph.value_info
            if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64}
    assert not [o for n in nodes[backward:decoder] for o in n.output if o in ints and shapes[o] == (2, 4, 4, 4)]
    assert len(decode_side) == 3 and all(shapes[o] == (8, 16) for o in decode_side)
    assert shapes["idx"] == (2, 4, 4, 4)


def test_native_pool_preconditions() -> None:
    # ceil_mode 1: a window may lie wholly in the padding (ORT's sentinel index): the PyOp keeps it.
    ceil = MaxPoolIndexPass().run(_pool_graph(_POOL_CEIL))
    (rec,) = ceil.records
    assert rec.get("native") is None and _ours(ceil.model)
    params = {"input_shape": [2, 4, 8, 8], "kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}
    assert "ceil_mode" in native_pool_problem(params)
    assert "uint8" in native_pool_problem(dict(params, kernel_shape=[16, 16], ceil_mode=0,
                                               input_shape=[2, 4, 32, 32]))
    assert "padding" in native_pool_problem(dict(params, kernel_shape=[2, 2], pads=[2, 0, 0, 0], ceil_mode=0))
    assert native_pool_problem(dict(params, ceil_mode=0)) is None
    # An index outside its window (ORT's sentinel for a NaN/-inf window) gets no valid code: the decode's Gather
    # then fails instead of handing MaxPoolGrad a wrong index.
    _, _, encode, decode = pool_tables(dict(params, ceil_mode=0))
    assert set(np.unique(encode)) - set(range(decode.size)) == {decode.size}   # packed: the tap count
    _, _, encode, decode = pool_tables(dict(params, ceil_mode=0, kernel_shape=[4, 4], strides=[4, 4]))
    assert set(np.unique(encode)) - set(range(decode.size)) == {255} and decode.size == 16
