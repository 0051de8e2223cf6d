"""Compiled multi-core CPU kernels (numba) for the codecs, and the switch between them and NumPy.

Each codec keeps its NumPy implementation as the reference; ``encode_cpu`` / ``decode_cpu`` call the
compiled kernel when their module runs with numba and produce the same bytes (tests run both backends).

The default backend, ``"auto"``, picks per kernel module: for ``AOT_BY_DEFAULT`` (dpr, sz, zfp, sparse, maxpool)
their ahead-of-time compiled copies (``aot.py``: the same kernel functions built by numba.pycc in a child process,
single-threaded, loaded without numba) -- or numba's parallel JIT kernels once the process has imported numba
anyway (``NUMBA_WHEN_LOADED``) --, NumPy otherwise (bits, intervalmask: NumPy was as fast or faster;
docs/cpu-codecs.md has the table). So no graph's process imports numba nor pays its ~115-125 MiB of RSS by
default (lossy plans did, for dpr / sz / zfp, until docs/notes/aotlossy.md). Without numba installed everything
is NumPy. ``ONNXCOMP_CODEC_BACKEND=numpy|numba|aot|auto`` or ``set_backend`` / ``use_backend`` choose explicitly
(``numba`` / ``numpy``: for every codec; ``aot``: AOT for every module, bits and intervalmask included).

Kernels are compiled on first use and cached on disk (``cache=True``): numba writes the cache into
``__pycache__`` next to this package, and where that is not writable (an installed, read-only site-packages)
into ``NUMBA_CACHE_DIR`` or the user cache directory (numba's own fallback locator), so a new process loads
machine code instead of compiling it.

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
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

BACKENDS = ("numpy", "numba", "aot")  # the concrete implementations
CHOICES = (*BACKENDS, "auto")  # what ONNXCOMP_CODEC_BACKEND / set_backend accept
# Kernel modules (and zfp's coder) whose compiled kernels beat NumPy by more than ~10 % at 1-16 MiB float32
# activations on this project's 2-core reference machine (docs/cpu-codecs.md, "Default backend per codec";
# sparse: ZVC/CSR 1.3-1.8x, docs/notes/codecspeed.md; maxpool: the table lookup of maxpool_index's encoder,
# 1.5-2x its NumPy path). Under "auto" they run AOT-compiled (aot.py: +<1 MiB of RSS instead of numba's ~125 MiB,
# docs/notes/numbarss.md, docs/notes/aotlossy.md; single-threaded) ... Each must have AOT_SIGNATURES.
AOT_BY_DEFAULT = frozenset({"dpr", "sz", "zfp", "sparse", "maxpool"})
# ... or with numba's parallel JIT kernels once the process has imported numba anyway (its RSS is paid then;
# on 2 free cores they take about half the single-threaded AOT kernels' wall time; zfp's AOT calls are split over
# threads by run_chunks instead). Same bytes either way.
NUMBA_WHEN_LOADED = AOT_BY_DEFAULT
# Codecs whose NumPy path holds more workspace than the compiled one (ZVC encode 1.85x vs 1.53x its input) and
# whose "auto" backend was NumPy in processes without numba: the planner keeps measuring them with NumPy.
_NUMPY_WORKSPACE_CODECS = frozenset({"zvc", "csr", "sparse", "maxpool_index"})
ENV_VAR = "ONNXCOMP_CODEC_BACKEND"

_lock = threading.Lock()
_backend: str | None = None
_modules: dict[str, SimpleNamespace | None] = {}  # "sparse" (numba JIT) or "aot:sparse" (None: unbuildable)
_kernel_lock = threading.Lock()  # one parallel launch at a time (workqueue is not thread-safe)


def numba_available() -> bool:
    """Whether numba is installed (found, not imported: importing it costs ~60 MiB of RSS)."""
    return importlib.util.find_spec("numba") is not None


def _default_backend() -> str:
    name = os.environ.get(ENV_VAR, "").strip().lower()
    if name:
        _check(name)
        return name
    return "auto" if numba_available() else "numpy"


def _check(name: str) -> None:
    if name not in CHOICES:
        raise ValueError(f"unknown codec backend {name!r} (from {ENV_VAR} or set_backend); "
                         f"choose one of {', '.join(CHOICES)}")
    if name in ("numba", "aot") and not numba_available():
        raise ValueError(f"codec backend 'numba' asked for but numba is not installed; "
                         f"pip install numba, or set {ENV_VAR}=numpy")


def backend() -> str:
    """The active CPU codec backend setting: "numba", "numpy" or "auto" (per module, see ``backend_for``)."""
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


def backend_for(module: str) -> str:
    """The implementation ("numba", "aot" or "numpy") that kernel module ``module`` (``custom_ops/cpu/<module>.py``,
    or "zfp") runs with under the active setting ("aot": if it cannot be built, ``kernels`` falls back to NumPy)."""
    name = backend()
    if name == "auto":
        if module in NUMBA_WHEN_LOADED and "numba" in sys.modules:
            return "numba"
        return "aot" if module in AOT_BY_DEFAULT else "numpy"
    if name == "aot":
        from .aot import MODULES

        return "aot" if module in MODULES else "numpy"
    return name


def workspace_backend(codec: str) -> str:
    """The backend setting to measure ``codec``'s per-call workspace under (planner/predict.py): NumPy for the
    sparse / maxpool_index codecs under "auto" (NumPy ran them in processes without numba before they had AOT
    kernels, and their NumPy path holds more: ZVC encode 1.85x vs 1.53x its input), else the active setting.
    AOT and numba JIT kernels run the same Python wrappers, whose NumPy arrays are what is measured (the
    kernels' own scratch is numba's allocator, not traced), so dpr / sz / zfp measure the same either way."""
    name = backend()
    return "numpy" if name == "auto" and codec in _NUMPY_WORKSPACE_CODECS else name


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


def threading_layer() -> None:
    """Select numba's workqueue layer (read at the first parallel launch; see the module doc) unless
    NUMBA_THREADING_LAYER says otherwise. Imports numba."""
    if "NUMBA_THREADING_LAYER" not in os.environ:
        import numba

        numba.config.THREADING_LAYER = "workqueue"


def _load(name: str) -> SimpleNamespace:
    from .aot import SOURCES

    threading_layer()
    package = __name__.rsplit(".", 1)[0]  # the codecs' package (zfp's kernels are custom_ops/_zfp_numba.py)
    mod: ModuleType = importlib.import_module(f"{package}.{SOURCES.get(name, 'cpu.' + name)}")
    public = getattr(mod, "__all__", None) or [k for k, v in vars(mod).items()
                                                 if callable(v) and not k.startswith("_")
                                                 and getattr(v, "__module__", None) == mod.__name__]
    # threads=1: a numba kernel's prange already runs on every core (run_chunks calls it once).
    return SimpleNamespace(threads=1, **{k: _locked(getattr(mod, k)) for k in public})


def aot_threads() -> int:
    """Threads an AOT kernel call may be split over (``run_chunks``): ``NUMBA_NUM_THREADS`` if set (the
    parallel JIT kernels' count), else the CPUs this process may run on."""
    env = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_pool: Any = None  # concurrent.futures.ThreadPoolExecutor for run_chunks, created on first use


def run_chunks(ns: SimpleNamespace, fn: Callable[..., Any], nchunks: int, *args: Any) -> list[Any]:
    """``fn(*args, c0, c1)`` over chunks [0, nchunks) of a kernel taking a chunk range (zfp's encode / decode):
    one call for numba's kernels (``ns.threads`` 1: prange uses every core), else split into up to ``ns.threads``
    contiguous ranges run at once, one on this thread and the rest on a shared pool (the AOT entry points are
    single-threaded and release the GIL; chunks write disjoint output, so the bytes are the same). The results
    of the calls, in chunk order."""
    global _pool
    parts = max(1, min(int(getattr(ns, "threads", 1)), nchunks))
    if parts == 1:
        return [fn(*args, 0, nchunks)]
    bounds = [i * nchunks // parts for i in range(parts + 1)]
    if _pool is None:
        with _lock:
            if _pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _pool = ThreadPoolExecutor(max_workers=max(1, aot_threads() - 1),
                                           thread_name_prefix="onnxcomp-codec")
    futures = [_pool.submit(fn, *args, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    first = fn(*args, bounds[0], bounds[1])
    return [first, *(f.result() for f in futures)]


def _load_aot(name: str) -> SimpleNamespace | None:
    from . import aot

    mod = aot.load(name)
    if mod is None:
        return None
    # No launch lock: the AOT kernels are single-threaded machine code, no numba threading layer involved.
    # threads: run_chunks may split a call over that many threads (the entry points release the GIL).
    return SimpleNamespace(threads=aot_threads(), **{k: getattr(mod, k) for k in mod.__all__})


def kernels(name: str) -> SimpleNamespace | None:
    """The public functions of ``custom_ops/cpu/<name>.py`` (behind the launch lock) if that module runs
    with numba (``backend_for``), their AOT-compiled copy if it runs "aot" (None if that cannot be built),
    else None: numba is imported only here, on first use."""
    impl = backend_for(name)
    if impl == "numpy":
        return None
    key = name if impl == "numba" else f"aot:{name}"
    if key not in _modules:
        with _lock:
            if key not in _modules:
                _modules[key] = _load(name) if impl == "numba" else _load_aot(name)
    return _modules[key]


def warm_up(codecs: list[str] | None = None) -> None:
    """Compile (or load from the cache) the kernels of ``codecs`` (default: every codec) now, e.g. before a
    session's first step. Codecs that run with NumPy only run their (tiny) samples: nothing is loaded."""
    if backend() == "numpy":
        return
    import numpy as np

    from .. import REGISTRY

    rng = np.random.default_rng(0)
    names = list(REGISTRY) if codecs is None else list(codecs)
    # The sparse / maxpool codecs last (historical order, kept: under "auto" every compiled module now picks
    # numba only once something has imported it; a kernel first met inside a training step must be loaded here).
    # Every sample, not the first few: numba compiles a kernel on its first call, and a codec's later samples
    # (sparse's ZVC mode at low density) reach kernels its first ones do not; a kernel first met inside a step
    # compiles there, and its compiler's memory lands in that step's peak (+11-13 MiB on squeezenet_s's lossy
    # plan under ORT's defaults, docs/notes/lossyvgg.md). The samples are small: ~5 ms a codec once compiled.
    for codec in [REGISTRY[c] for c in sorted(names, key=lambda c: c in _NUMPY_WORKSPACE_CODECS)]:
        for x, params in codec.sample_inputs(rng):
            codec.decode_cpu(codec.encode_cpu(x, **params), **params)
