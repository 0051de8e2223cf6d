"""``njit`` / ``prange`` for the kernel modules that also ship ahead-of-time compiled (``cpu/aot.py``).

Normally numba's own. While ``aot.load`` executes its copy of such a module, ``njit`` instead binds each kernel
to the function of the same name in the module's AOT-compiled extension and ``prange`` is ``range``: the
module's Python wrappers then call machine code without numba (nor llvmlite) being imported. numba is
imported only on first use here, never at import of this module.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

# Set by aot.load (under cpu._lock) for the duration of one kernel module's execution.
AOT_LIB: ModuleType | None = None


def njit(*args: Any, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """numba.njit(*args, **options), or the AOT-compiled function of the decorated kernel's name."""
    lib = AOT_LIB
    if lib is not None:
        return lambda fn: getattr(lib, fn.__name__)
    import numba

    return numba.njit(*args, **options)


def __getattr__(name: str) -> Any:  # PEP 562: ``from ._jit import prange`` lands here
    if name == "prange":
        if AOT_LIB is not None:
            return range
        import numba

        return numba.prange
    raise AttributeError(name)
