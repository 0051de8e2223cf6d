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

With a payload store (``runtime.payload_store``: ``inline`` or ``async``) the encoder hands ORT a token frame
instead of the payload, and may compress on a worker thread; the decoder takes the payload back by token.
The results are the same bytes either way.

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
from onnxcomp.runtime import bounds, framing, payload_store

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


# Encoder inputs the payload store had to copy because they did not own their memory (a view into ORT's
# buffer would be overwritten once the op returns). onnxruntime-extensions 0.15.2 hands owned copies: 0.
input_copies = 0


def _copied(x: np.ndarray) -> np.ndarray:
    global input_copies
    input_copies += 1
    return x.copy()


def _store_name(codec: Codec, attrs: dict[str, Any]) -> str:
    """The payload store's name for an op's stash: codec and tensor (one stash may be held by two codecs, e.g.
    a ReLU mask for ReluGrad and sz for ConvGrad); the decode order is learned by it."""
    return f"{codec.name}:{_tensor_name(attrs) or '?'}"


def _remember_shape(attr: Any, shape: tuple[int, ...]) -> None:
    key = attr.decode() if isinstance(attr, bytes) else str(attr)
    if _encoded_shapes.get(key, shape) != shape:
        _encoded_shapes[key] = None  # two tensors share these params: no single answer
    else:
        _encoded_shapes[key] = shape


def _make_encode(codec: Codec) -> Callable[..., tuple[np.ndarray, ...]]:
    in_dtype = np.dtype(codec.input_dtype)
    enc_type = contract.encode_op(codec.name)
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
        anchor = np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        # The planner's payload size, kept (auto's sz variant): the bound loosens instead of the payload growing.
        cap = int(params["max_bytes"]) if key is not None and eb in params and "max_bytes" in params else None
        mode = payload_store.mode()
        if mode == "off" and params.get("store") == "inline":    # the graph asks for it (contract.CONTROL_PARAMS)
            mode = "inline"
        if mode != "off":
            # The bridge made x for this call (a fresh array it owns): the store may keep it past the return.
            held = x if x.flags.owndata else _copied(x)
            token = payload_store.store().put(mode, _store_name(codec, attrs), held.nbytes,
                                              _stored_encode(held, codec_params, key if eb in params else None,
                                                             _tensor_name(attrs), cap))
            return (*framing.stored_payload(codec, x.shape, token), anchor)
        arrays = _encode_arrays(x, codec_params, key, cap)
        if key is not None and eb in params:
            bounds.record_payload(key, sum(a.nbytes for a in arrays), x.nbytes)
        return (*framing.frame(codec, arrays, checksum=_verify), anchor)

    def _encode_arrays(x: np.ndarray, codec_params: dict[str, Any], key: str | None = None,
                       cap: int | None = None) -> tuple[np.ndarray, ...]:
        if cap is not None and key is not None:
            payload = bounds.encode_capped(codec, x, codec_params, cap, key)
        else:
            payload = codec.encode_cpu(x, **codec_params)
        return tuple(np.ascontiguousarray(p, dtype=d) for p, d in zip(payload, out_dtypes))

    def _stored_encode(x: np.ndarray, codec_params: dict[str, Any], bound_key: str | None,
                       tensor: str | None, cap: int | None = None) -> Callable[[], Any]:
        def run() -> Any:
            try:
                arrays = _encode_arrays(x, codec_params, bound_key, cap)
                if bound_key is not None:
                    bounds.record_payload(bound_key, sum(a.nbytes for a in arrays), x.nbytes)
                return arrays
            except BaseException as exc:  # noqa: BLE001  (may run on the worker: no caller to catch it)
                from onnxcomp.runtime import op_errors

                op_errors.record(enc_type, tensor, exc)
                return payload_store.FAILED
        return run

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
        arrays = tuple(inputs[:contract.DECODER_TRIGGER])
        stored = framing.stored_token(codec, arrays)
        if stored is not None:   # the payload store holds the payload (whatever the mode is now)
            token, dims = stored
            raw = attrs.get(PARAMS_ATTR)
            # A prefetch (made with the decode this stash had in the previous step) is used only for the same
            # params and dims.
            key = f"{raw.decode() if isinstance(raw, bytes) else raw}|{dims}"
            y = payload_store.store().take(payload_store.mode(), token, _store_name(codec, attrs), key,
                                           functools.partial(_decoded, dims=dims, codec_params=codec_params))
            return np.zeros(dims, dtype=out_dtype) if y is payload_store.FAILED else y
        payload, dims = framing.unframe(codec, arrays)
        if payload is None:  # the encoder failed; its error is already recorded
            return np.zeros(dims, dtype=out_dtype)
        return _decoded(payload, dims, codec_params)

    def _decoded(payload: tuple[np.ndarray, ...], dims: tuple[int, ...], codec_params: dict[str, Any]) -> np.ndarray:
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
