"""Compiled multi-core CPU kernels (numba) for the codecs, and the switch between them and NumPy.

Each codec keeps its NumPy implementation as the reference; ``encode_cpu`` / ``decode_cpu`` call the
compiled kernel when the backend is ``"numba"`` and produce the same bytes (tests run both backends).

The backend is ``"numba"`` when numba imports, else ``"numpy"``; ``ONNXCOMP_CODEC_BACKEND=numpy|numba``
or ``set_backend`` / ``use_backend`` choose explicitly. Kernels are compiled on first use and cached on disk
(``cache=True``): numba writes the cache into ``__pycache__`` next to this package, and where that is not
writable (an installed, read-only site-packages) into ``NUMBA_CACHE_DIR`` or the user cache directory
(numba's own fallback locator), so a new process loads machine code instead of compiling it.

Every kernel is ``nogil``: an encoder may run on a Python thread while ORT computes on others.

Threading: numba's ``workqueue`` layer unless ``NUMBA_THREADING_LAYER`` says otherwise. On this 2-core
machine, shared and oversubscribed, the OpenMP layer (numba's pick when libgomp is present) spin-waits at
its barriers while the thread it waits for is descheduled: up to 27x slower kernels were measured. workqueue
does not support concurrent parallel launches from several threads, so every kernel call goes through one
lock (calls are serialised; each already uses every core).
"""
from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

BACKENDS = ("numpy", "numba")
ENV_VAR = "ONNXCOMP_CODEC_BACKEND"

_lock = threading.Lock()
_backend: str | None = None
_modules: dict[str, SimpleNamespace] = {}
_kernel_lock = threading.Lock()  # one parallel launch at a time (workqueue is not thread-safe)


def numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def _default_backend() -> str:
    name = os.environ.get(ENV_VAR, "").strip().lower()
    if name:
        _check(name)
        return name
    return "numba" if numba_available() else "numpy"


def _check(name: str) -> None:
    if name not in BACKENDS:
        raise ValueError(f"unknown codec backend {name!r} (from {ENV_VAR} or set_backend); "
                         f"choose one of {', '.join(BACKENDS)}")
    if name == "numba" and not numba_available():
        raise ValueError(f"codec backend 'numba' asked for but numba is not installed; "
                         f"pip install numba, or set {ENV_VAR}=numpy")


def backend() -> str:
    """The active CPU codec backend: "numba" or "numpy"."""
    global _backend
    if _backend is None:
        with _lock:
            if _backend is None:
                _backend = _default_backend()
    return _backend


def set_backend(name: str) -> None:
    global _backend
    _check(name)
    _backend = name


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run a block with the given backend, then restore the previous one."""
    prev = backend()
    set_backend(name)
    try:
        yield
    finally:
        set_backend(prev)


def _locked(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _kernel_lock:
            return fn(*args, **kwargs)

    return call


def _load(name: str) -> SimpleNamespace:
    if "NUMBA_THREADING_LAYER" not in os.environ:
        import numba

        numba.config.THREADING_LAYER = "workqueue"  # read at the first parallel launch; see module doc
    mod: ModuleType = importlib.import_module(f"{__name__}.{name}")
    public = getattr(mod, "__all__", None) or [k for k, v in vars(mod).items()
                                                 if callable(v) and not k.startswith("_")
                                                 and getattr(v, "__module__", None) == mod.__name__]
    return SimpleNamespace(**{k: _locked(getattr(mod, k)) for k in public})


def kernels(name: str) -> SimpleNamespace | None:
    """The public functions of ``custom_ops/cpu/<name>.py`` (behind the launch lock) if the numba backend
    is active, else None."""
    if backend() != "numba":
        return None
    ns = _modules.get(name)
    if ns is None:
        with _lock:
            ns = _modules.get(name)
            if ns is None:
                ns = _modules[name] = _load(name)
    return ns


def warm_up(codecs: list[str] | None = None) -> None:
    """Compile (or load from the cache) the kernels of ``codecs`` (default: every codec) now, e.g. before a
    session's first step."""
    if backend() != "numba":
        return
    import numpy as np

    from .. import REGISTRY

    rng = np.random.default_rng(0)
    for codec in (REGISTRY.values() if codecs is None else [REGISTRY[c] for c in codecs]):
        for x, params in codec.sample_inputs(rng)[:2]:
            codec.decode_cpu(codec.encode_cpu(x, **params), **params)
