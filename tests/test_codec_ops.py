"""Codecs as ONNX Runtime custom ops: Encode/Decode PyOps run inside an InferenceSession."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, ValueInfoProto, helper

# Define the PyOps at collection time: they must exist before any session registers the library.
from onnxcomp.runtime import codec_ops, framing
from onnxcomp.custom_ops import REGISTRY, get_codec
from onnxcomp.custom_ops import maxpool_index as mpi

_ONNX_TYPE = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8, "int64": TensorProto.INT64,
              "int32": TensorProto.INT32, "uint16": TensorProto.UINT16, "int8": TensorProto.INT8,
              "uint32": TensorProto.UINT32, "float64": TensorProto.DOUBLE, "bool": TensorProto.BOOL,
              "int16": TensorProto.INT16, "uint64": TensorProto.UINT64}


def _session_options() -> ort.SessionOptions:
    from onnxcomp.runtime.session import session_options

    return session_options()


def _run(nodes: list, inputs: dict[str, np.ndarray], in_types: dict[str, int], outputs: list[str]) -> list:
    inputs = {**inputs, "trigger": np.zeros(1, np.float32)}
    in_types = {**in_types, "trigger": TensorProto.FLOAT}
    graph = helper.make_graph(
        nodes, "codec_ops",
        [helper.make_tensor_value_info(n, in_types[n], list(v.shape)) for n, v in inputs.items()],
        [ValueInfoProto(name=n) for n in outputs])  # untyped: ORT infers the outputs
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(codec_ops.DOMAIN, 1)])
    model.ir_version = 8
    so = _session_options()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(outputs, inputs)


def _codec_nodes(name: str, src: str, params: dict[str, Any]) -> tuple[list, list[str], str]:
    codec = get_codec(name)
    enc, dec = codec_ops.op_type_names(name)
    payload = [f"{name}_{p}" for p in codec.payload_names]
    attr = codec_ops.params_attr(params)
    nodes = [helper.make_node(enc, [src], [*payload, f"{name}_anchor"], domain=codec_ops.DOMAIN, params=attr),
             # The trigger input only orders the decoder (the graph pass feeds it one element of dY).
             helper.make_node(dec, [*payload, "trigger"], [f"{name}_decoded"], domain=codec_ops.DOMAIN,
                              params=attr)]
    return nodes, payload, f"{name}_decoded"


def test_op_type_names() -> None:
    assert codec_ops.op_type_names("signbits") == ("OnnxcompEncode_signbits", "OnnxcompDecode_signbits")
    assert codec_ops.DOMAIN == "ai.onnx.contrib"
    for name in REGISTRY:
        enc, dec = codec_ops.op_type_names(name)
        assert enc.startswith("OnnxcompEncode_") and dec.startswith("OnnxcompDecode_")


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (9,), (0, 4)])
def test_relu_signbits_encode_decode(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if x.size:
        x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    nodes, payload, decoded = _codec_nodes("signbits", "Y", {})
    nodes = [helper.make_node("Relu", ["X"], ["Y"]), *nodes,
             helper.make_node("Reshape", ["Y", "signbits_anchor"], ["Z"])]  # forward consumer via the anchor
    bits, shape_out, anchor, d, z = _run(nodes, {"X": x}, {"X": TensorProto.FLOAT},
                                         [*payload, "signbits_anchor", decoded, "Z"])
    y = np.maximum(x, 0)
    assert bits.dtype == np.uint8 and bits.size == (x.size + 7) // 8
    assert anchor.dtype == np.int64 and tuple(anchor) == shape
    assert framing.unframe(get_codec("signbits"), (bits, shape_out))[1] == shape  # the shape travels framed
    np.testing.assert_array_equal(d, (y > 0).astype(np.float32))
    assert d.dtype == np.float32 and d.shape == shape
    np.testing.assert_array_equal(z, np.maximum(x, 0))  # NaN passes Relu as NaN; assert_array_equal matches NaNs


@pytest.mark.parametrize("shape,params", [
    ((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 2, 9, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((1, 2, 10, 9), dict(kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 1], pads=[2, 0, 1, 1])),
])
def test_maxpool_index_encode_decode(shape: tuple[int, ...], params: dict[str, Any]) -> None:
    x = np.random.default_rng(1).integers(0, 3, size=shape).astype(np.float32)  # ties
    codec_params = dict(input_shape=list(shape), **params)
    nodes, payload, decoded = _codec_nodes("maxpool_index", "I", codec_params)
    nodes = [helper.make_node("MaxPool", ["X"], ["P", "I"], **params), *nodes]
    idx, offsets, anchor, d = _run(nodes, {"X": x}, {"X": TensorProto.FLOAT},
                                   ["I", payload[0], "maxpool_index_anchor", decoded])
    assert offsets.dtype == np.uint8
    assert offsets.size == (idx.size * mpi.offset_bits(params["kernel_shape"][0] * params["kernel_shape"][1]) + 7) // 8
    assert tuple(anchor) == idx.shape
    assert d.dtype == np.int64
    np.testing.assert_array_equal(d, idx)


def _sample(codec: Any) -> list[tuple[np.ndarray, dict[str, Any]]]:
    hook = getattr(codec, "sample_inputs", None)
    if hook is not None:
        return list(hook(np.random.default_rng(2)))
    rng = np.random.default_rng(2)
    x = (np.maximum(rng.standard_normal((2, 3, 5, 7)), 0)).astype(codec.input_dtype)
    return [(x, {})]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_codec_op_matches_numpy(name: str) -> None:
    codec = get_codec(name)
    for x, params in _sample(codec)[:4]:
        if x.ndim == 0:
            continue
        nodes, payload, decoded = _codec_nodes(name, "X", params)
        outs = _run(nodes, {"X": x}, {"X": _ONNX_TYPE[codec.input_dtype]}, [*payload, f"{name}_anchor", decoded])
        expected_payload = codec.encode_cpu(x, **params)
        # The op frames the codec's shape array; stripped of the frame, the payload is the codec's own bytes.
        unframed, dims = framing.unframe(codec, tuple(outs[:len(payload)]))
        assert dims == x.shape
        for got, want, dt in zip(unframed, expected_payload, codec.payload_dtypes):
            assert got.dtype == np.dtype(dt)
            np.testing.assert_array_equal(got, want)
        assert tuple(outs[len(payload)]) == x.shape
        np.testing.assert_array_equal(outs[-1], codec.decode_cpu(expected_payload, **params))


def test_params_attr_is_canonical_json() -> None:
    a = codec_ops.params_attr({"strides": [np.int64(2), 2], "kernel_shape": (2, 2)})
    assert a == '{"kernel_shape": [2, 2], "strides": [2, 2]}'
