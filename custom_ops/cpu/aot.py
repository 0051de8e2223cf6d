"""Ahead-of-time compiled copies of the codecs' kernel modules (``cpu/{sparse,maxpool,sz,dpr,bits,intervalmask}.py``
and zfp's ``_zfp_numba.py``), loadable without numba.

Why: loading one numba kernel from numba's on-disk cache costs a process ~115 MiB of RSS (``import numba``
+54 MiB, then the first cached call +62 MiB: ~69 MiB of LLVM's own code and data pages in libllvmlite.so,
~39 MiB of heap and Python objects, ~5 MiB of scipy; `docs/notes/numbarss.md`), because numba links cached object
code with LLVM's JIT. An extension module compiled by ``numba.pycc`` from the same kernel functions is plain
machine code: importing it and calling its kernels adds < 1 MiB. So a graph's process runs its codecs' kernels
compiled at almost no RSS (lossless graphs ran NumPy before; lossy ones paid numba's ~125 MiB at set-up).

The AOT build runs once per kernel source / numba / numpy / Python / CPU in a child process (numba's RSS is
the child's, ~5 s of CPU) and is cached beside numba's cache; the extension is compiled for the host CPU
(``target_cpu = "host"``: the generic x86-64 target measured 0.38x copy vs 0.54x for ZVC encode), hence the
CPU flags in the cache key. Each kernel call runs single-threaded (``prange`` compiles as ``range``; pycc has
no parallel target) and releases the GIL (built with numba's ``release_gil``), so a caller may split one tensor
over threads (``cpu.run_chunks``, zfp). This path is for processes that have not imported numba; once numba is
loaded, ``cpu`` prefers the parallel JIT kernels. Any failure (no C compiler, no numba, numba without pycc) leaves the module
on NumPy with a warning: same bytes either way.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import marshal
import os
import platform
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

from . import _jit

# Kernel modules with AOT_SIGNATURES: cpu.kernels name -> module, relative to the codecs' package (custom_ops).
SOURCES = {"sparse": "cpu.sparse", "maxpool": "cpu.maxpool", "sz": "cpu.sz", "dpr": "cpu.dpr", "bits": "cpu.bits",
           "intervalmask": "cpu.intervalmask", "zfp": "_zfp_numba"}
# Other sources a module's compiled code comes from (sz's kernels use zfp's LLVM intrinsics): in its cache key.
DEPENDS = {"sz": ("_zfp_numba",)}
MODULES = frozenset(SOURCES)
CODE_SUFFIX = ".code"  # the kernel module's marshalled code object, beside its extension (same cache key)
_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent  # the codecs' package directory
_PACKAGE = __package__.rsplit(".", 1)[0]  # its module name (onnxcomp.custom_ops, or custom_ops in a checkout)
_failed: set[str] = set()


def _cpu_id() -> str:
    """Host CPU identity for the cache key (the extension uses its instruction set extensions)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features", "model name")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def source_path(module: str) -> Path:
    """File of kernel module ``module`` (a SOURCES value)."""
    return _ROOT.joinpath(*module.split(".")).with_suffix(".py")


def module_name(name: str) -> str:
    """The extension's module name: its kernel source, this build recipe and what the code depends on."""
    h = hashlib.sha256()
    sources = [source_path(m).read_bytes() for m in (SOURCES[name], *DEPENDS.get(name, ()))]
    for part in (*sources, Path(__file__).read_bytes(), _version("numba").encode(),
                 _version("numpy").encode(), sys.version.encode(), platform.machine().encode(), _cpu_id().encode()):
        h.update(hashlib.sha256(part).digest())
    return f"_onnxcomp_aot_{name}_{h.hexdigest()[:20]}"


def cache_dirs() -> list[Path]:
    """Where to keep built extensions, first writable wins: ``__pycache__`` beside the kernels (as numba's
    cache), ``$NUMBA_CACHE_DIR/onnxcomp_aot``, ``~/.cache/onnxcomp/aot``."""
    dirs = [_HERE / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        dirs.append(Path(os.environ["NUMBA_CACHE_DIR"]) / "onnxcomp_aot")
    dirs.append(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "onnxcomp" / "aot")
    return dirs


def _built(name: str) -> Path | None:
    """Path of the extension for kernel module ``name``, building it (in a child process) if no cache has it."""
    mod = module_name(name)
    filename = mod + importlib.machinery.EXTENSION_SUFFIXES[0]
    for d in cache_dirs():
        if (d / filename).is_file() and (d / (mod + CODE_SUFFIX)).is_file():
            return d / filename
    errors = []
    for d in cache_dirs():
        try:
            d.mkdir(parents=True, exist_ok=True)
            if not os.access(d, os.W_OK):
                continue
        except OSError:
            continue
        code = f"import {__package__}.aot as a; a._build({name!r}, {str(d)!r})"
        # The child sees this process's sys.path (entries added at run time, e.g. by pytest, included), so it
        # imports this very package; _build checks that it did.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env)
        if r.returncode == 0 and (d / filename).is_file() and (d / (mod + CODE_SUFFIX)).is_file():
            return d / filename
        errors.append(f"{d}: {(r.stderr or r.stdout).strip()[-800:]}")
    warnings.warn(f"onnxcomp: could not build the ahead-of-time kernels of {source_path(SOURCES[name]).name} "
                  f"({name}); its codecs run with "
                  f"NumPy (same bytes, slower). {' | '.join(errors) or 'no writable cache directory'}",
                  RuntimeWarning, stacklevel=3)
    return None


def _build(name: str, out_dir: str) -> None:
    """Child process: compile kernel module ``name``'s AOT_SIGNATURES kernels with numba.pycc into out_dir
    (written under a temporary name, then renamed: concurrent builders do not see half a file)."""
    import importlib

    from numba.pycc import CC, compiler

    class _Flags(compiler.Flags):  # every entry point releases the GIL around the kernel (numba's nogil)
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.release_gil = True

    compiler.Flags = _Flags  # read by ModuleCompiler._cull_exports; this child process only builds

    kernels = importlib.import_module(f"{_PACKAGE}.{SOURCES[name]}")
    if Path(kernels.__file__).resolve() != source_path(SOURCES[name]):  # another checkout's copy on sys.path
        raise RuntimeError(f"{kernels.__file__} is not {source_path(SOURCES[name])}")
    mod = module_name(name)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        cc = CC(mod)
        cc.output_dir = tmp
        cc.target_cpu = "host"
        cc.verbose = False
        for fn, sig in kernels.AOT_SIGNATURES.items():
            py_func = getattr(kernels, fn).py_func
            if isinstance(sig, str):
                cc.export(fn, sig)(py_func)
            else:  # several signatures: one entry point each, fn__0, fn__1, ... (_jit binds them)
                for i, s in enumerate(sig):
                    cc.export(f"{fn}__{i}", s)(py_func)
        cc.compile()
        (built,) = Path(tmp).glob(mod + "*")
        src = source_path(SOURCES[name])
        (Path(tmp) / "code").write_bytes(marshal.dumps(compile(src.read_bytes(), str(src), "exec", dont_inherit=True)))
        os.replace(Path(tmp) / "code", Path(out_dir) / (mod + CODE_SUFFIX))
        os.replace(built, Path(out_dir) / (mod + importlib.machinery.EXTENSION_SUFFIXES[0]))


def load(name: str) -> ModuleType | None:
    """A copy of kernel module ``name`` (SOURCES) whose kernels are the AOT-compiled ones (numba not imported),
    or None if they cannot be built here. Call under ``cpu._lock``."""
    if name not in MODULES or name in _failed:
        return None
    path = _built(name)
    if path is None:
        _failed.add(name)
        return None
    mod = module_name(name)
    lib = importlib.util.module_from_spec(importlib.util.spec_from_file_location(mod, path))
    lib.__spec__.loader.exec_module(lib)
    # Named beside the original (same parent package), so its relative imports resolve to the same modules.
    parent = f"{_PACKAGE}.{SOURCES[name]}".rsplit(".", 1)[0]
    spec = importlib.util.spec_from_file_location(f"{parent}._aot_{name}", source_path(SOURCES[name]))
    kernels = importlib.util.module_from_spec(spec)
    # The module's code object compiled at build time, not its source now: compiling _zfp_numba.py's 1,750 lines
    # here (every process, where bytecode is not written: PYTHONDONTWRITEBYTECODE) cost ~5 MiB of set-up RSS and
    # left heap holes that the training step re-faulted (+1.3 MiB of growth on ResNet-18's zfp plan).
    code = marshal.loads((path.parent / (mod + CODE_SUFFIX)).read_bytes())
    _jit.AOT_LIB = lib
    try:
        exec(code, vars(kernels))  # noqa: S102  (our own module's code, compiled from its source by _build)
    finally:
        _jit.AOT_LIB = None
    return kernels
