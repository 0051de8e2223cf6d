"""``njit`` / ``prange`` / ``intrinsic`` for the kernel modules, which also ship ahead-of-time compiled
(``cpu/aot.py``).

Normally numba's own. While ``aot.load`` executes its copy of such a module (``AOT_LIB`` set), ``njit`` instead
binds each exported kernel (``AOT_SIGNATURES``) to the function of the same name in the module's AOT-compiled
extension behind a check of its array arguments (a kernel exported under several signatures, ``name__0``,
``name__1``, ...: the one whose array dtypes match),
``prange`` is ``range``, and helpers that only compiled kernels call (``njit`` functions not exported,
``intrinsic`` LLVM snippets) become stubs that raise if Python ever calls them: the module's Python wrappers
then call machine code without numba (nor llvmlite) being imported. numba is imported only on first use here,
never at import of this module.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

# Set by aot.load (under cpu._lock) for the duration of one kernel module's execution.
AOT_LIB: ModuleType | None = None


def _not_compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Stand-in for a helper the AOT copy has no entry point for (inlined / linked into the exported kernels)."""
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{fn.__module__}.{fn.__name__} is only callable from compiled kernels: it has no "
                           f"ahead-of-time entry point (add it to the module's AOT_SIGNATURES)")

    stub.__name__ = fn.__name__
    return stub


# numba type codes of AOT_SIGNATURES -> NumPy dtype names
_DTYPES = {"b1": "bool", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64", "u1": "uint8", "u2": "uint16",
           "u4": "uint32", "u8": "uint64", "f4": "float32", "f8": "float64"}


def array_args(signature: str) -> list[tuple[str, int] | None]:
    """(dtype, ndim) of each C-contiguous array argument of a pycc signature such as
    ``"void(u1[::1], u4[:, ::1], i8)"``, None for scalars."""
    inner = signature[signature.index("(") + 1:signature.rindex(")")]
    args, depth, start = [], 0, 0
    for i, ch in enumerate(inner + ","):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
    out: list[tuple[str, int] | None] = []
    for a in args:
        if "[" in a:
            if not a.endswith("::1]"):
                raise ValueError(f"AOT signature {signature!r}: only C-contiguous arrays ([..., ::1]) are supported")
            out.append((_DTYPES[a[:a.index("[")]], a.count(",") + 1))
        else:
            out.append(None)
    return out


def _matches(specs: list[tuple[str, int] | None], args: tuple[Any, ...]) -> bool:
    import numpy as np

    if len(specs) != len(args):
        return False
    for spec, a in zip(specs, args):
        if spec is not None and not (isinstance(a, np.ndarray) and a.dtype == spec[0] and a.ndim == spec[1]
                                     and a.flags.c_contiguous):
            return False
    return True


def _bind(lib: ModuleType, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The entry point(s) of kernel ``fn`` in extension ``lib``, behind a check of the array arguments: pycc's
    entry points do not check dtypes (a uint8 array passed for a uint32 one is read as uint32: out of bounds)."""
    sig = fn.__globals__.get("AOT_SIGNATURES", {}).get(fn.__name__)
    if sig is None:
        return _not_compiled(fn)
    sigs = [sig] if isinstance(sig, str) else list(sig)
    entries = [getattr(lib, fn.__name__)] if isinstance(sig, str) else \
        [getattr(lib, f"{fn.__name__}__{i}") for i in range(len(sigs))]
    variants = [(array_args(s), f) for s, f in zip(sigs, entries)]

    def call(*args: Any) -> Any:
        for specs, f in variants:
            if _matches(specs, args):
                return f(*args)
        raise TypeError(f"{fn.__module__}.{fn.__name__}: no ahead-of-time signature for arguments "
                        f"{[(a.dtype.name, a.ndim) if hasattr(a, 'dtype') else type(a).__name__ for a in args]}; "
                        f"compiled: {sigs}")

    call.__name__ = fn.__name__
    return call


def njit(*args: Any, **options: Any) -> Any:
    """numba.njit(*args, **options), or the AOT-compiled function of the decorated kernel's name."""
    lib = AOT_LIB
    if lib is not None:
        if len(args) == 1 and callable(args[0]) and not options:  # bare @njit
            return _bind(lib, args[0])
        return lambda fn: _bind(lib, fn)
    import numba

    return numba.njit(*args, **options)


def intrinsic(fn: Callable[..., Any]) -> Any:
    """numba.extending.intrinsic(fn), or (AOT copy) a stub: intrinsics only exist inside compiled code."""
    if AOT_LIB is not None:
        return _not_compiled(fn)
    from numba.extending import intrinsic as numba_intrinsic

    return numba_intrinsic(fn)


def __getattr__(name: str) -> Any:  # PEP 562: ``from ._jit import prange`` lands here
    if name == "prange":
        if AOT_LIB is not None:
            return range
        import numba

        return numba.prange
    raise AttributeError(name)
