"""Import onnxruntime's training API without torch.

`import onnxruntime` from the training build imports torch, although the training API (Module, Optimizer,
CheckpointState) never uses it. The chain (onnxruntime-training 1.19.2):

    onnxruntime/__init__ → capi.onnxruntime_validation.validate_build_package_info()
      → from onnxruntime.training.ortmodule import ORTModule   (ImportError is caught: "no ORTModule")
      → onnxruntime/training/__init__ → from . import amp, artifacts, optim
      → artifacts → onnxruntime.tools → pytorch_export_helpers → import torch
      (optim.fused_adam and ortmodule import torch as well)

onnxruntime-extensions (whose PyOps onnxcomp registers) does the same in its ``cvt`` module, which tries
`import torch` for an optional Whisper converter and carries on without it on ImportError.

Measured on this machine: a process that imports onnxruntime and onnxruntime.training.api peaks at ~289 MiB
RSS with torch, ~45 MiB without. `install()` adds one import hook that changes exactly these things:

- while `onnxruntime` itself initialises, `onnxruntime.training.ortmodule` is reported missing, which the
  validation code already treats as "CPU build without ORTModule"; while `onnxruntime_extensions.cvt`
  initialises, `torch` is (unless torch is loaded already, then nothing changes);
- the `onnxruntime.training` package is created without running its ``__init__``; its public names (amp,
  artifacts, optim, ORTModule, TrainingParameters, ...) are imported on first attribute access instead.

So `from onnxruntime.training import api` loads only the API, and anything else still works, importing torch
only when it is actually asked for. Set ONNXCOMP_FULL_ORT_IMPORT=1 to switch the hook off.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from types import ModuleType
from typing import Any

_TRAINING = "onnxruntime.training"
_ORTMODULE = "onnxruntime.training.ortmodule"
# What onnxruntime/training/__init__.py would have bound, and where each name comes from.
_TRAINING_EXPORTS = {
    "PropagateCastOpsStrategy": "onnxruntime.capi._pybind_state",
    "TrainingParameters": "onnxruntime.capi._pybind_state",
    "is_ortmodule_available": "onnxruntime.capi._pybind_state",
    "ORTModule": _ORTMODULE,
}
# Modules whose initialisation runs with some optional imports reported missing (both catch ImportError).
_HIDDEN_WHILE_LOADING = {
    "onnxruntime": frozenset({_ORTMODULE}),
    "onnxruntime_extensions.cvt": frozenset({"torch"}),
}
_state = threading.local()


def _hidden() -> set[str]:
    if not hasattr(_state, "hidden"):
        _state.hidden = set()
    return _state.hidden


def _training_getattr(name: str) -> Any:
    if name in _TRAINING_EXPORTS:
        return getattr(importlib.import_module(_TRAINING_EXPORTS[name]), name)
    try:
        return importlib.import_module(f"{_TRAINING}.{name}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {_TRAINING!r} has no attribute {name!r}") from None


class _LazyTrainingPackage(importlib.abc.Loader):
    """Create onnxruntime.training as a package whose submodules load on demand."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # default module creation

    def exec_module(self, module: ModuleType) -> None:
        module.__getattr__ = _training_getattr  # type: ignore[attr-defined]
        module.__all__ = ["amp", "artifacts", "optim", *_TRAINING_EXPORTS]  # type: ignore[attr-defined]


class _LoadWithHidden(importlib.abc.Loader):
    """Run a module's own loader with some optional imports reported missing for the duration."""

    def __init__(self, real: importlib.abc.Loader, hide: frozenset[str]) -> None:
        self.real, self.hide = real, hide

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        added = self.hide - _hidden()
        _hidden().update(added)
        try:
            self.real.exec_module(module)
        finally:
            _hidden().difference_update(added)


class LeanOnnxruntimeFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name in _hidden():
            raise ModuleNotFoundError(f"{name} is optional here and skipped (onnxcomp.runtime.lean_import)",
                                      name=name)
        if name != _TRAINING and name not in _HIDDEN_WHILE_LOADING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        if name == _TRAINING:
            spec.loader = _LazyTrainingPackage()
        else:
            spec.loader = _LoadWithHidden(spec.loader, _HIDDEN_WHILE_LOADING[name])
        return spec


def install() -> bool:
    """Install the hook (idempotent). Returns whether it is active: not when disabled through
    ONNXCOMP_FULL_ORT_IMPORT=1 or when onnxruntime.training was imported the ordinary way already."""
    if os.environ.get("ONNXCOMP_FULL_ORT_IMPORT", "") not in ("", "0"):
        return False
    if any(isinstance(f, LeanOnnxruntimeFinder) for f in sys.meta_path):
        return True
    if _TRAINING in sys.modules:
        return False
    sys.meta_path.insert(0, LeanOnnxruntimeFinder())
    return True
