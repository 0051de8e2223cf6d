"""ORTModule (onnxruntime-training 1.19.2) on the pinned torch 2.13: what it takes, and what onnxcomp applies.

Findings (CPU, torch 2.13.0):
1. `from onnxruntime.training.ortmodule import ORTModule` fails: ORTModule imports
   `torch.onnx._internal.jit_utils`, `torch.onnx._type_utils` and `torch.onnx._globals`, which torch moved to
   `torch.onnx._internal.torchscript_exporter.*`. `torch_compat()` aliases the old names to the new modules;
   the import then succeeds.
2. `ORTModule(module)` then refuses to start: "ORTModule's extensions were not detected ... Run
   `python -m torch_ort.configure`". Its C++ extensions (aten_op_executor, torch_interop_utils) must be
   compiled against the installed torch: `python -m onnxcomp.ortmodule --build` runs ORT's own
   `torch_cpp_extensions.install.build_torch_cpp_extensions()` with the aliases in place (needs g++).

`wrap(module, policy=...)` applies the aliases, checks the extensions, and maps the policy onto what ORTModule
itself offers: its memory optimizer (recomputation, ORTMODULE_MEMORY_OPT_LEVEL) for the exact policies.
onnxcomp's graph passes do not reach ORTModule's graphs: ORTModule builds and runs its forward/backward
graphs internally (no hook between its gradient graph build and session creation in 1.19.2), so the encoding
policies are refused with that reason rather than silently ignored.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .errors import OnnxcompError

_MOVED = {  # old torch.onnx module → where torch 2.13 keeps it
    "torch.onnx._internal.jit_utils": "torch.onnx._internal.torchscript_exporter.jit_utils",
    "torch.onnx._type_utils": "torch.onnx._internal.torchscript_exporter._type_utils",
    "torch.onnx._globals": "torch.onnx._internal.torchscript_exporter._globals",
}
# Policies ORTModule can carry out itself, and the memory-optimizer level each maps to.
_ORTMODULE_POLICIES = {"none": None, "recompute": "1", "lossless": "1"}


def torch_compat() -> None:
    """Alias the torch.onnx modules ORTModule 1.19.2 imports to their torch 2.13 locations (idempotent)."""
    for old, new in _MOVED.items():
        if old in sys.modules:
            continue
        try:
            mod = importlib.import_module(new)
        except ImportError:
            continue  # an older torch still has the old module
        sys.modules[old] = mod
        parent, _, attr = old.rpartition(".")
        setattr(importlib.import_module(parent), attr, mod)


def extensions_built() -> bool:
    from onnxruntime.training import ortmodule

    ext_dir = os.path.join(ortmodule.ORTMODULE_TORCH_CPP_DIR, "cpu")
    built = [f for f in os.listdir(ortmodule.ORTMODULE_TORCH_CPP_DIR) if f.endswith(".so")] if os.path.isdir(
        ortmodule.ORTMODULE_TORCH_CPP_DIR) else []
    return bool(built) or any(f.endswith(".so") for _, _, fs in os.walk(ext_dir) for f in fs)


def wrap(module: Any, policy: str = "lossless") -> Any:
    """ORTModule(module) with ``policy`` applied through ORTModule's own memory optimizer."""
    if policy not in _ORTMODULE_POLICIES:
        raise OnnxcompError(
            f"policy {policy!r} cannot be applied inside ORTModule: it builds and runs its gradient graph "
            "internally, so onnxcomp's encoders cannot be inserted; use one of "
            f"{', '.join(_ORTMODULE_POLICIES)} here, or onnxcomp.torch.Trainer for the encoding policies"
        )
    torch_compat()
    try:
        from onnxruntime.training.ortmodule import ORTModule
    except Exception as exc:
        raise OnnxcompError(f"ORTModule does not import on this torch: {type(exc).__name__}: {exc}") from None
    level = _ORTMODULE_POLICIES[policy]
    if level is not None:
        os.environ["ORTMODULE_MEMORY_OPT_LEVEL"] = level
    try:
        return ORTModule(module)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OnnxcompError(f"ORTModule cannot start: {first}; build its C++ extensions with "
                            "`python -m onnxcomp.ortmodule --build` (needs g++)") from None


def build_extensions() -> None:
    torch_compat()
    from onnxruntime.training.ortmodule.torch_cpp_extensions import install

    install.build_torch_cpp_extensions()


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:
        build_extensions()
    else:
        print("usage: python -m onnxcomp.ortmodule --build", file=sys.stderr)
        sys.exit(2)
