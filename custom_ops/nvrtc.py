"""Compile CUDA C++ to PTX with NVRTC through ctypes: no GPU, no CuPy, no CUDA toolkit needed.

Used by the tests (every kernel in ``kernels/`` must compile on a machine without a GPU) and handy for
checking a kernel edit before it reaches the GPU machine, where CuPy compiles the same source itself.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

_NVRTC_SUCCESS = 0
_lib: ctypes.CDLL | None = None


class NvrtcNotFound(RuntimeError):
    """libnvrtc could not be located."""


class NvrtcError(RuntimeError):
    """NVRTC rejected the source; the message carries the compile log."""


def _candidate_paths() -> list[str]:
    paths: list[str] = []
    if os.environ.get("ONNXCOMP_NVRTC"):
        paths.append(os.environ["ONNXCOMP_NVRTC"])
    # pip wheel nvidia-cuda-nvrtc-cu12 (the test extra); CuPy wheels also load NVRTC from here.
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            paths += sorted(glob.glob(os.path.join(loc, "lib", "libnvrtc.so*")))
            paths += sorted(glob.glob(os.path.join(loc, "bin", "nvrtc64_*.dll")))
    # A CUDA toolkit install.
    for env in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(env)
        if root:
            paths += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")))
    paths += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    found = ctypes.util.find_library("nvrtc")
    if found:
        paths.append(found)
    paths += ["libnvrtc.so.12", "libnvrtc.so"]
    # libnvrtc-builtins must not be picked: it has no nvrtcCreateProgram.
    return [p for p in paths if "builtins" not in os.path.basename(p)]


def find_libnvrtc() -> str:
    """Path (or soname) of a loadable libnvrtc; raises NvrtcNotFound with what was tried."""
    tried = _candidate_paths()
    for p in tried:
        if os.path.sep in p and not Path(p).exists():
            continue
        try:
            ctypes.CDLL(p)
            return p
        except OSError:
            continue
    raise NvrtcNotFound(
        "libnvrtc not found; install the test extra (pip install nvidia-cuda-nvrtc-cu12), a CUDA toolkit, "
        f"or set ONNXCOMP_NVRTC to the library path. Tried: {tried}"
    )


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(find_libnvrtc())
        lib.nvrtcCreateProgram.argtypes = [
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
        ]
        lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        lib.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nvrtcGetPTXSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        lib.nvrtcGetPTX.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def nvrtc_version() -> tuple[int, int]:
    lib = _load()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_to_ptx(source: str, name: str, options: Sequence[str] = ()) -> str:
    """Compile ``source`` (file name ``name`` in messages) to PTX; raise NvrtcError with the log on failure."""
    lib = _load()

    def check(rc: int, what: str) -> None:
        if rc != _NVRTC_SUCCESS:
            raise NvrtcError(f"{what} failed: {lib.nvrtcGetErrorString(rc).decode()}")

    prog = ctypes.c_void_p()
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
          "nvrtcCreateProgram")
    try:
        opts = (ctypes.c_char_p * max(len(options), 1))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        log_size = ctypes.c_size_t()
        check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(log_size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(log_size.value)
        check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        if rc != _NVRTC_SUCCESS:
            raise NvrtcError(
                f"compiling {name}: {lib.nvrtcGetErrorString(rc).decode()}\n{log.value.decode(errors='replace')}"
            )
        ptx_size = ctypes.c_size_t()
        check(lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx_size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(ptx_size.value)
        check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
