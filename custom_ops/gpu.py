"""Shared CuPy helpers for the codecs' GPU backends.

CuPy is imported lazily inside each function: this module must import on machines without CuPy (the CPU
CI and the ORT runtime), and only the GPU backends call into it.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .base import KERNEL_DIR

# NVRTC options shared by CuPy (GPU machine) and the compile test (nvrtc.py), so the test checks what runs.
NVRTC_OPTIONS: tuple[str, ...] = ("--std=c++14",)
BLOCK = 256
_MAX_GRID = 1 << 16  # kernels use grid-stride loops, so a capped grid still covers every element

_modules: dict[str, Any] = {}
_lock = threading.Lock()


def module(kernel_file: str) -> Any:
    """The cupy.RawModule for ``kernels/<kernel_file>``, compiled once per process."""
    mod = _modules.get(kernel_file)
    if mod is None:
        import cupy as cp

        with _lock:
            mod = _modules.get(kernel_file)
            if mod is None:
                source = (KERNEL_DIR / kernel_file).read_text()
                mod = cp.RawModule(code=source, options=NVRTC_OPTIONS)
                _modules[kernel_file] = mod
    return mod


def kernel(kernel_file: str, name: str) -> Any:
    """One ``extern "C"`` kernel of ``kernels/<kernel_file>`` as a cupy.RawKernel."""
    return module(kernel_file).get_function(name)


def launch(kernel_file: str, name: str, n_threads: int, args: tuple[Any, ...], block: int = BLOCK) -> None:
    """Launch a 1-D grid-stride kernel over ``n_threads`` logical threads; no-op when there is no work."""
    if n_threads <= 0:
        return
    grid = min((n_threads + block - 1) // block, _MAX_GRID)
    kernel(kernel_file, name)((grid,), (block,), args)


def i64(v: int) -> np.int64:
    """Scalar kernel argument for a ``long long`` parameter (CuPy takes the C type from the NumPy type)."""
    return np.int64(v)


def shape_array(shape: tuple[int, ...]) -> Any:
    """The int64 shape payload entry, on the device. The copy is asynchronous (CuPy stages it through pinned
    memory): a blocking copy from pageable memory would wait for every kernel queued before it."""
    import cupy as cp

    host = np.asarray(shape, dtype=np.int64).reshape(len(shape))
    try:
        return cp.asarray(host, blocking=False)
    except TypeError:  # a CuPy without the blocking keyword
        return cp.asarray(host)


def host_shape(shape_payload: Any) -> tuple[int, ...]:
    """Shape tuple from an int64 shape payload (cupy or numpy)."""
    arr = shape_payload.get() if hasattr(shape_payload, "get") else np.asarray(shape_payload)
    return tuple(int(d) for d in arr.reshape(-1))
