"""Every registered codec as a pair of ONNX Runtime custom ops (onnxruntime-extensions PyOps).

``OnnxcompEncode_<name>`` (domain ``ai.onnx.contrib``): input X; outputs the payload arrays in
``payload_names`` order, then ``anchor`` = int64 shape of X. The graph pass makes X's forward consumers read
``Reshape(X, anchor)``, which forces the encoder to run in the forward pass under any execution order.
``OnnxcompDecode_<name>``: inputs the payload arrays, then ``trigger`` (a float tensor, ignored: the pass
feeds it one element of the backward consumer's dY so the decoder cannot run before that gradient exists);
output the decoded tensor.
Codec params travel as ONE string attribute ``params`` holding JSON (PyOp attributes arrive as strings).

The ops frame each payload (``framing``: a header check always, an xxh3 checksum after
``set_verify_payloads(True)``) without touching the codecs' bitstreams, and never let an exception reach ORT:
a failure is recorded (``op_errors``; the training step raises it, naming the op and the params' ``tensor``)
and the op returns placeholders of the right shape -- zeros for a decoder, a "failed" frame for an encoder --
so the rest of the step runs on well-formed tensors.

Importing this module registers the ops with onnxruntime-extensions; it must happen before
``SessionOptions.register_custom_ops_library(onnxruntime_extensions.get_library_path())``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
from onnxruntime_extensions import PyCustomOpDef, onnx_op

from onnxcomp.custom_ops import REGISTRY, Codec, contract
from onnxcomp.custom_ops.contract import CONTROL_PARAMS, DOMAIN, PARAMS_ATTR  # noqa: F401  (re-export)
from onnxcomp.runtime import bounds, framing

_DT = {
    "float32": PyCustomOpDef.dt_float,
    "float64": PyCustomOpDef.dt_double,
    "uint8": PyCustomOpDef.dt_uint8,
    "int8": PyCustomOpDef.dt_int8,
    "uint16": PyCustomOpDef.dt_uint16,
    "int16": PyCustomOpDef.dt_int16,
    "int32": PyCustomOpDef.dt_int32,
    "uint32": PyCustomOpDef.dt_uint32,
    "int64": PyCustomOpDef.dt_int64,
    "uint64": PyCustomOpDef.dt_uint64,
    "bool": PyCustomOpDef.dt_bool,
}


def op_type_names(codec_name: str) -> tuple[str, str]:
    """(encode op type, decode op type) for a registered codec."""
    return contract.encode_op(codec_name), contract.decode_op(codec_name)


params_attr = contract.params_value
_parse = contract.parse_params


@functools.lru_cache(maxsize=4096)
def _parsed(params: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(all params, the codec's params without CONTROL_PARAMS) of one attribute string, parsed once: a node's
    attribute never changes, so per-call JSON decoding is wasted. Callers must not mutate the dicts."""
    parsed = _parse(params)
    return parsed, {k: v for k, v in parsed.items() if k not in CONTROL_PARAMS}


def _pydtype(name: str) -> int:
    try:
        return _DT[name]
    except KeyError:
        raise TypeError(f"dtype {name!r} has no onnxruntime-extensions PyOp type") from None


_verify = False
# Last shape each encode op (by its params string, which names its tensor) saw: a decoder whose frame is too
# corrupt to read its dims still returns a tensor of the shape the backward pass expects.
_encoded_shapes: dict[str, tuple[int, ...] | None] = {}


def set_verify_payloads(on: bool) -> None:
    """Checksum every payload at encode and verify it at decode (``--verify-payloads``); process-wide."""
    global _verify
    _verify = bool(on)


def verify_payloads() -> bool:
    return _verify


def _tensor_name(attrs: dict[str, Any]) -> str | None:
    params = _parse(attrs.get(PARAMS_ATTR))
    name = params.get("tensor") or params.get("key")
    return str(name) if name is not None else None


def _remember_shape(attr: Any, shape: tuple[int, ...]) -> None:
    key = attr.decode() if isinstance(attr, bytes) else str(attr)
    if _encoded_shapes.get(key, shape) != shape:
        _encoded_shapes[key] = None  # two tensors share these params: no single answer
    else:
        _encoded_shapes[key] = shape


def _make_encode(codec: Codec) -> Callable[..., tuple[np.ndarray, ...]]:
    in_dtype = np.dtype(codec.input_dtype)
    out_dtypes = [np.dtype(d) for d in codec.payload_dtypes]

    def encode(x: np.ndarray, **attrs: Any) -> tuple[np.ndarray, ...]:
        _remember_shape(attrs.get(PARAMS_ATTR, ""), tuple(np.shape(x)))
        x = np.asarray(x, dtype=in_dtype)
        params, codec_params = _parsed(attrs.get(PARAMS_ATTR))
        key = params.get("key")
        eb = contract.ERROR_BOUND_PARAM
        if key is not None and eb in params:
            codec_params = {**codec_params, eb: bounds.bound(key, float(params[eb]))}
            if bounds.collecting():
                bounds.record_activation(key, int(np.count_nonzero(x)), int(x.size), codec_params[eb])
        if key is not None and eb in params and "max_bytes" in params:   # the planner's payload size, kept
            payload = bounds.encode_capped(codec, x, codec_params, int(params["max_bytes"]), key)
        else:
            payload = codec.encode_cpu(x, **codec_params)
        arrays = tuple(np.ascontiguousarray(p, dtype=d) for p, d in zip(payload, out_dtypes))
        if key is not None and eb in params:
            bounds.record_payload(key, sum(a.nbytes for a in arrays), x.nbytes)
        return (*framing.frame(codec, arrays, checksum=_verify), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim))

    def fallback(feed: Any, attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
        shape = tuple(np.shape(feed[0]))
        return (*framing.failed_payload(codec, shape), np.asarray(shape, dtype=np.int64).reshape(len(shape)))

    encode.onnxcomp_fallback = fallback  # type: ignore[attr-defined]
    encode.onnxcomp_tensor = _tensor_name  # type: ignore[attr-defined]
    return encode


def _make_decode(codec: Codec) -> Callable[..., np.ndarray]:
    out_dtype = np.dtype(codec.output_dtype)
    shape_index = list(codec.payload_names).index("shape")

    def decode(*inputs: np.ndarray, **attrs: Any) -> np.ndarray:
        params, codec_params = _parsed(attrs.get(PARAMS_ATTR))
        if "dy_numel" in params and bounds.collecting():
            # The trigger is ReduceL2(dY): the scale of dY for the controller at the cost of one float input.
            bounds.record_gradient(params["key"], float(np.asarray(inputs[contract.DECODER_TRIGGER]).reshape(-1)[0]),
                                   int(params["dy_numel"]))
        payload, dims = framing.unframe(codec, tuple(inputs[:contract.DECODER_TRIGGER]))
        if payload is None:  # the encoder failed; its error is already recorded
            return np.zeros(dims, dtype=out_dtype)
        y = codec.decode_cpu(payload, **codec_params)
        if tuple(np.shape(y)) != dims:
            raise framing.PayloadError(f"{codec.name}: decoded shape {tuple(np.shape(y))} != framed shape {dims}")
        return np.ascontiguousarray(y, dtype=out_dtype)

    def fallback(feed: Any, attrs: dict[str, Any]) -> np.ndarray:
        dims = framing.framed_dims(codec, feed[shape_index]) if len(feed) > shape_index else None
        if dims is None:
            key = attrs.get(PARAMS_ATTR, "")
            dims = _encoded_shapes.get(key.decode() if isinstance(key, bytes) else str(key)) or (0,)
        return np.zeros(dims, dtype=out_dtype)

    decode.onnxcomp_fallback = fallback  # type: ignore[attr-defined]
    decode.onnxcomp_tensor = _tensor_name  # type: ignore[attr-defined]
    return decode


def register_all() -> list[str]:
    """Register an encode/decode PyOp pair for every codec in REGISTRY not registered yet; returns op types."""
    added = []
    for name, codec in sorted(REGISTRY.items()):
        if name in _registered:
            continue
        enc_type, dec_type = op_type_names(name)
        attrs = {PARAMS_ATTR: PyCustomOpDef.dt_string}
        onnx_op(op_type=enc_type, inputs=[_pydtype(codec.input_dtype)],
                outputs=[*map(_pydtype, codec.payload_dtypes), PyCustomOpDef.dt_int64], attrs=attrs)(
            _make_encode(codec))
        onnx_op(op_type=dec_type, inputs=[*map(_pydtype, codec.payload_dtypes), PyCustomOpDef.dt_float],
                outputs=[_pydtype(codec.output_dtype)], attrs=attrs)(_make_decode(codec))
        _registered.add(name)
        added += [enc_type, dec_type]
    return added


_registered: set[str] = set()
register_all()
