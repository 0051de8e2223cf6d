"""Python custom-operator (onnxruntime-extensions PyOp) infrastructure.

The stock PyOp bridge hook returns every output as ``array.flatten().tolist()``; converting a
multi-megabyte tensor to a Python list and back costs ~70x more than a memcpy. The C++ side of
onnxruntime-extensions 0.15.2 (pybind11 build) reads each output with ``cast<py::array>()`` and, if the
element size matches the declared output type, memcpy's ``size * itemsize`` bytes from its data
pointer, so it accepts an ndarray as well as a list. It checks neither contiguity nor the element
*kind* (float32 and int32 are both 4 bytes) nor the element count against the shape: our hook
therefore hands back a C-contiguous flat array of exactly the declared dtype, whose size matches
the shape it reports.

Op definitions (``@onnx_op``) must be imported *before* a SessionOptions registers the
extensions library: ``register_custom_ops_library`` snapshots the PyOps defined at that moment.
"""
from __future__ import annotations

import importlib
import threading
from typing import Any

import numpy as np
from onnxruntime_extensions import Opdef, PyCustomOpDef

from onnxcomp.errors import OnnxcompError

# The module another part of onnxcomp writes: encode/decode ops in domain ai.onnx.contrib.
CODEC_OPS_MODULE = "onnxcomp.runtime.codec_ops"

_NUMPY_DTYPES: dict[int, np.dtype | None] = {
    PyCustomOpDef.dt_float: np.dtype(np.float32),
    PyCustomOpDef.dt_double: np.dtype(np.float64),
    PyCustomOpDef.dt_uint8: np.dtype(np.uint8),
    PyCustomOpDef.dt_int8: np.dtype(np.int8),
    PyCustomOpDef.dt_uint16: np.dtype(np.uint16),
    PyCustomOpDef.dt_int16: np.dtype(np.int16),
    PyCustomOpDef.dt_uint32: np.dtype(np.uint32),
    PyCustomOpDef.dt_int32: np.dtype(np.int32),
    PyCustomOpDef.dt_uint64: np.dtype(np.uint64),
    PyCustomOpDef.dt_int64: np.dtype(np.int64),
    PyCustomOpDef.dt_bool: np.dtype(np.bool_),
    PyCustomOpDef.dt_complex64: np.dtype(np.complex64),
    PyCustomOpDef.dt_complex128: np.dtype(np.complex128),
    PyCustomOpDef.dt_string: None,  # strings still travel as a list of str
}

_lock = threading.Lock()
_installed = False
_codec_imported = False
# Opdef ids present when a SessionOptions first registered the extensions library (None: not yet).
_registered_ids: frozenset[int] | None = None
# Invocations served by our hook; tests read it to prove the fast hook (not the stock one) is active.
calls = 0


def _flat_output(value: Any, type_code: int) -> tuple[tuple[int, ...], Any]:
    arr = np.asarray(value)
    if type_code == PyCustomOpDef.dt_float16:
        raise TypeError("PyOp outputs cannot be float16 (unsupported by onnxruntime-extensions)")
    dtype = _NUMPY_DTYPES.get(type_code)
    if dtype is None:
        return arr.shape, [str(s) for s in arr.reshape(-1).tolist()]
    # reshape(-1) of a C-contiguous array is a view: no copy on the fast path.
    return arr.shape, np.ascontiguousarray(arr, dtype=dtype).reshape(-1)


def _fast_hook(k_id: int, feed: Any, attributes: dict[str, str]) -> tuple:
    """Same contract as onnxruntime_extensions._ocos._on_pyop_invocation, minus the .tolist(), and it never
    raises: an exception escaping a PyOp aborts the whole process (onnxruntime-extensions 0.15.2 lets the
    pybind11 error reach std::terminate). A failing op is recorded in ``op_errors`` (the training step raises
    it) and ORT gets placeholder outputs: the op's own ``onnxcomp_fallback(feed, attrs)`` when it has one
    (right shapes, so later ops in the step run normally), else empty arrays of the declared types."""
    global calls
    op = Opdef._odlist.get(k_id)
    calls += 1
    try:
        if op is None:
            raise RuntimeError(f"Unable to find PyOp function id={k_id}; was it decorated with @onnx_op?")
        attrs = op.cast_attributes(attributes)
        return _pack(k_id, op, op.body(*feed, **attrs))
    except BaseException as exc:  # noqa: BLE001  (nothing may escape into ORT; KeyboardInterrupt included)
        return _failed(k_id, op, feed, attributes, exc)


def _pack(k_id: int, op: Any, rv: Any) -> tuple:
    outs = rv if isinstance(rv, tuple) else (rv,)
    types = list(op._nativedef.output_types)
    if len(outs) != len(types):
        raise RuntimeError(f"PyOp {op.op_type} returned {len(outs)} outputs, declared {len(types)}")
    res: list[Any] = [k_id]
    for value, type_code in zip(outs, types):
        shape, flat = _flat_output(value, type_code)
        res.append(shape)
        res.append(flat)
    return tuple(res)


def _failed(k_id: int, op: Any, feed: Any, attributes: dict[str, str], exc: BaseException) -> tuple:
    from onnxcomp.runtime import op_errors

    body = getattr(op, "body", None)
    op_type = getattr(op, "op_type", f"PyOp id={k_id}")
    tensor = None
    try:
        name_of = getattr(body, "onnxcomp_tensor", None)
        tensor = name_of(attributes) if name_of is not None else None
    except Exception:  # noqa: BLE001  (a name is a nicety; the attributes may be what is broken)
        pass
    op_errors.record(op_type, tensor, exc)
    fallback = getattr(body, "onnxcomp_fallback", None)
    if fallback is not None:
        try:
            return _pack(k_id, op, fallback(feed, attributes))
        except Exception:  # noqa: BLE001
            pass
    types = list(op._nativedef.output_types) if op is not None else []
    res: list[Any] = [k_id]
    for type_code in types:
        dtype = _NUMPY_DTYPES.get(type_code) or np.dtype(np.float32)
        res += [(0,), [] if type_code == PyCustomOpDef.dt_string else np.empty(0, dtype=dtype)]
    return tuple(res)


def install_fast_hook() -> None:
    """Install the ndarray-returning PyOp hook (idempotent; replaces the stock .tolist() hook)."""
    global _installed
    with _lock:
        if _installed:
            return
        # Importing onnxruntime_extensions installs the stock hook at import time; ours must come after.
        import onnxruntime_extensions._ocos  # noqa: F401

        PyCustomOpDef.install_hooker(_fast_hook)
        _installed = True


def fast_hook_installed() -> bool:
    return _installed


def import_op_definitions() -> None:
    """Import onnxcomp's codec PyOps so they are defined before a session registers the library."""
    global _codec_imported
    install_fast_hook()
    if _codec_imported:
        return
    try:
        importlib.import_module(CODEC_OPS_MODULE)
    except ModuleNotFoundError as exc:
        # Tolerate only the codec module itself being absent, never a missing dependency inside it.
        if exc.name != CODEC_OPS_MODULE:
            raise
        return
    _codec_imported = True


def prepare_registration() -> None:
    """Define onnxcomp's ops; refuse to register the library if PyOps appeared since an earlier
    registration in this process.

    Verified on onnxruntime-extensions 0.15.2 + ORT 1.19.2: defining a PyOp after a session registered
    the library, then registering it again (or re-running older sessions after several new ops) ends
    in SIGSEGV: registered op pointers point into a std::vector that adding an op reallocates.
    """
    global _registered_ids
    import_op_definitions()
    with _lock:
        current = frozenset(Opdef._odlist)
        if _registered_ids is not None and current != _registered_ids:
            late = sorted(Opdef._odlist[k].op_type for k in current - _registered_ids)
            raise OnnxcompError(
                f"PyOp(s) {late} were defined after an ONNX Runtime session had registered the "
                "onnxruntime-extensions library in this process, which crashes ORT; import every module "
                "defining @onnx_op ops before creating the first session (or use a fresh process)"
            )
        _registered_ids = current


install_fast_hook()
