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

import functools
import json
from typing import Any, Callable

import numpy as np
from onnxruntime_extensions import PyCustomOpDef, onnx_op

from onnxcomp.custom_ops import REGISTRY, Codec
from onnxcomp.runtime import bounds

# Bookkeeping params the graph pass adds for the run-time bound controller; codecs never see them.
CONTROL_PARAMS = frozenset({"key", "weight", "dy_numel", "batch", "adaptive", "out_spatial"})

DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions puts every PyOp in this domain
PARAMS_ATTR = "params"

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
    return f"OnnxcompEncode_{codec_name}", f"OnnxcompDecode_{codec_name}"


def params_attr(params: dict[str, Any]) -> str:
    """The ``params`` attribute value for a node: canonical JSON (sorted keys, numpy scalars as Python)."""
    return json.dumps(params, sort_keys=True, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def _parse(params: Any) -> dict[str, Any]:
    if isinstance(params, bytes):
        params = params.decode()
    return json.loads(params) if params else {}


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


def _make_encode(codec: Codec) -> Callable[..., tuple[np.ndarray, ...]]:
    in_dtype = np.dtype(codec.input_dtype)
    out_dtypes = [np.dtype(d) for d in codec.payload_dtypes]

    def encode(x: np.ndarray, **attrs: Any) -> tuple[np.ndarray, ...]:
        x = np.asarray(x, dtype=in_dtype)
        params, codec_params = _parsed(attrs.get(PARAMS_ATTR))
        key = params.get("key")
        if key is not None and "eb" in params:
            codec_params = {**codec_params, "eb": bounds.bound(key, float(params["eb"]))}
            if bounds.collecting():
                bounds.record_activation(key, int(np.count_nonzero(x)), int(x.size), codec_params["eb"])
        payload = codec.encode_cpu(x, **codec_params)
        arrays = tuple(np.ascontiguousarray(p, dtype=d) for p, d in zip(payload, out_dtypes))
        if key is not None and "eb" in params:
            bounds.record_payload(key, sum(a.nbytes for a in arrays), x.nbytes)
        return (*arrays, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim))

    return encode


def _make_decode(codec: Codec) -> Callable[..., np.ndarray]:
    out_dtype = np.dtype(codec.output_dtype)

    def decode(*inputs: np.ndarray, **attrs: Any) -> np.ndarray:
        params, codec_params = _parsed(attrs.get(PARAMS_ATTR))
        if "dy_numel" in params and bounds.collecting():
            # The trigger is ReduceL2(dY): the scale of dY for the controller at the cost of one float input.
            bounds.record_gradient(params["key"], float(np.asarray(inputs[-1]).reshape(-1)[0]),
                                   int(params["dy_numel"]))
        y = codec.decode_cpu(tuple(inputs[:-1]), **codec_params)
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
