"""Native sign bits (passes/signbits.py ``native``; encode_stash._encode_native_bits): a ReLU sign mask packed by
MatMulInteger and unpacked by Gather, standard ONNX ops only. Checked against the bitmask PyOp path on a
hand-written training graph that ORT runs: the payload is the codec's bytes, the gradients are bit for bit."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from graphs import TWO_CONV, parse, two_conv
from test_passes_unit import _upstream

from onnxcomp.custom_ops import contract, get_codec
from onnxcomp.passes import MaskGradPass, SignBitsPass
from onnxcomp.passes.base import check_model
from onnxcomp.passes.encode_stash import NATIVE_BITS_LUT

GRADS = ("dinput", "w1_grad", "w2_grad")


def _with_outputs(model: onnx.ModelProto, names: tuple[str, ...]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs ``names`` (the gradients, a payload)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for name in names:
        out.graph.output.append(onnx.helper.make_value_info(name, onnx.TypeProto()))
    return out


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], outputs: tuple[str, ...],
         order: str) -> list[np.ndarray]:
    import onnxruntime as ort

    from onnxcomp.runtime import session_options

    so = session_options(arena=True, mem_pattern=True, mem_reuse=True, execution_order=order)
    sess = ort.InferenceSession(_with_outputs(model, outputs).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(list(outputs), feeds)


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.BOOL:
            feeds[vi.name] = np.array(False)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _ours(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if contract.codec_op(n.domain, n.op_type) is not None]


def test_native_bits_use_onnx_ops_only_and_keep_the_timing() -> None:
    result = SignBitsPass().run(two_conv())
    out = result.model
    check_model(out, "signbits")
    (rec,) = result.records
    assert rec["codec"] == "bitmask" and rec["native"] == "bits" and rec["encoded_tensor"] == "y"
    assert not _ours(out)
    nodes = list(out.graph.node)
    by_out = {o: n for n in nodes for o in n.output}
    # Forward: Greater(y, 0) -> Cast -> Reshape -> MatMulInteger -> Cast right after the Relu; the second Conv
    # reads y through a Reshape whose shape waits on the payload (the encoder runs in the forward pass).
    relu = next(n for n in nodes if n.op_type == "Relu")
    chain = [n.op_type for n in nodes[nodes.index(relu) + 1:nodes.index(relu) + 6]]
    assert chain == ["Greater", "Cast", "Reshape", "MatMulInteger", "Cast"]
    payload = next(iter(rec["payload"]))
    assert rec["payload"][payload] == 2 * 4 * 8 * 8 // 8
    conv2 = next(n for n in nodes if n.name == "Conv_2")
    gated = by_out[conv2.input[0]]
    assert gated.op_type == "Reshape" and payload in _upstream(out, gated.input[1])
    # Backward: the decode waits on ReluGrad's dY and sits just before it; ReluGrad reads Cast(mask, float).
    relu_grad = next(n for n in nodes if n.op_type == "ReluGrad")
    cast = by_out[relu_grad.input[1]]
    assert cast.op_type == "Cast" and by_out[cast.input[0]].name == rec["decoder"]
    decoder = by_out[cast.input[0]]
    assert {"dy", payload} <= _upstream(out, decoder.output[0])
    assert any(n.op_type == "Gather" and n.input[0] == NATIVE_BITS_LUT for n in nodes)
    assert nodes.index(relu_grad) - nodes.index(decoder) <= 2 and "x" not in relu_grad.input


@pytest.mark.parametrize("order", ["default", "priority"])
def test_native_bits_payload_and_gradients_equal_the_pyop_path(order: str) -> None:
    model = two_conv()
    feeds = _feeds(model)
    feeds["input"][0, 0, :2, :2] = 0.0     # exact zeros among the ReLU inputs
    native = SignBitsPass().run(model)
    pyop = SignBitsPass(native=False).run(model)
    assert pyop.records[0].get("native") is None and _ours(pyop.model)
    payload = next(iter(native.records[0]["payload"]))
    got = _run(native.model, feeds, (*GRADS, payload, "y"), order)
    ref = _run(pyop.model, feeds, GRADS, order)
    base = _run(model, feeds, GRADS, order)
    y = got[-1]
    # The payload is the bitmask codec's bits (np.packbits, little bit order) of y > 0, byte for byte.
    bits, _ = get_codec("bitmask").encode_cpu(y > 0)
    assert got[-2].dtype == np.uint8 and np.array_equal(got[-2].reshape(-1), bits)
    assert 0 < int(np.count_nonzero(y > 0)) < y.size
    for g, r, b in zip(got[:len(GRADS)], ref, base):
        assert g.dtype == np.float32 and np.array_equal(g.view(np.uint32), r.view(np.uint32))
        assert np.array_equal(g.view(np.uint32), b.view(np.uint32))


def test_native_bits_preconditions() -> None:
    # 4·5·5 = 100 elements: not rows of 8, so the PyOp keeps it; native=False: the PyOp everywhere.
    odd = SignBitsPass().run(parse(TWO_CONV.replace("float[2,3,8,8] input", "float[1,3,5,5] input")))
    (rec,) = odd.records
    assert rec.get("native") is None and rec["codec"] == "bitmask" and _ours(odd.model)
    # Only the mask form has a native variant (the float signbits decode stays a PyOp).
    float_form = SignBitsPass(mask=False).run(two_conv())
    assert float_form.records[0].get("native") is None and _ours(float_form.model)


def test_mask_grad_still_finds_the_native_mask() -> None:
    # The lossy policies' MaskGradPass looks for ReluGrad(dY, Cast(bool mask)): the native decode is such a mask.
    out = MaskGradPass().run(SignBitsPass().run(two_conv()).model)
    assert out.modified and not any(n.op_type == "ReluGrad" for n in out.model.graph.node)
