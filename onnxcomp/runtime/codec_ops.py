"""Every registered codec as a pair of ONNX Runtime custom ops (onnxruntime-extensions PyOps).

``OnnxcompEncode_<name>`` (domain ``ai.onnx.contrib``): input X; outputs the payload arrays in
``payload_names`` order, then ``anchor`` = int64 shape of X. The graph pass makes X's forward consumers read
``Reshape(X, anchor)``, which forces the encoder to run in the forward pass under any execution order.
``OnnxcompDecode_<name>``: inputs the payload arrays, then ``trigger`` (a float tensor, ignored: the pass
feeds it one element of the backward consumer's dY so the decoder cannot run before that gradient exists);
output the decoded tensor.
Codec params travel as ONE string attribute ``params`` holding JSON (PyOp attributes arrive as strings).

Importing this module registers the ops with onnxruntime-extensions; it must happen before
``SessionOptions.register_custom_ops_library(onnxruntime_extensions.get_library_path())``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from onnxruntime_extensions import PyCustomOpDef, onnx_op

from onnxcomp.custom_ops import REGISTRY, Codec, contract
from onnxcomp.custom_ops.contract import CONTROL_PARAMS, DOMAIN, PARAMS_ATTR  # noqa: F401  (re-export)
from onnxcomp.runtime import bounds

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


def _pydtype(name: str) -> int:
    try:
        return _DT[name]
    except KeyError:
        raise TypeError(f"dtype {name!r} has no onnxruntime-extensions PyOp type") from None


def _make_encode(codec: Codec) -> Callable[..., tuple[np.ndarray, ...]]:
    in_dtype = np.dtype(codec.input_dtype)
    out_dtypes = [np.dtype(d) for d in codec.payload_dtypes]

    def encode(x: np.ndarray, **attrs: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, dtype=in_dtype)
        params = _parse(attrs.get(PARAMS_ATTR))
        key = params.get("key")
        eb = contract.ERROR_BOUND_PARAM
        if key is not None and eb in params:
            params[eb] = bounds.bound(key, float(params[eb]))
            if bounds.collecting():
                bounds.record_activation(key, int(np.count_nonzero(x)), int(x.size), params[eb])
        payload = codec.encode_cpu(x, **contract.codec_params(params))
        arrays = tuple(np.ascontiguousarray(p, dtype=d) for p, d in zip(payload, out_dtypes))
        if key is not None and eb in params:
            bounds.record_payload(key, sum(a.nbytes for a in arrays), x.nbytes)
        return (*arrays, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim))

    return encode


def _make_decode(codec: Codec) -> Callable[..., np.ndarray]:
    out_dtype = np.dtype(codec.output_dtype)

    def decode(*inputs: np.ndarray, **attrs: Any) -> np.ndarray:
        params = _parse(attrs.get(PARAMS_ATTR))
        if "dy_numel" in params and bounds.collecting():
            # The trigger is ReduceL2(dY): the scale of dY for the controller at the cost of one float input.
            bounds.record_gradient(params["key"], float(np.asarray(inputs[contract.DECODER_TRIGGER]).reshape(-1)[0]),
                                   int(params["dy_numel"]))
        y = codec.decode_cpu(tuple(inputs[:contract.DECODER_TRIGGER]), **contract.codec_params(params))
        return np.ascontiguousarray(y, dtype=out_dtype)

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
