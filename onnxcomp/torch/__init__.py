"""PyTorch entry points. Attributes load lazily: `import onnxcomp.torch` does not import torch or ORT."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Trainer": "onnxcomp.torch.trainer", "FitResult": "onnxcomp.torch.trainer",
    "compress_activations": "onnxcomp.torch.hooks", "POLICIES": "onnxcomp.torch.hooks",
    "Policy": "onnxcomp.torch.hooks",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'onnxcomp.torch' has no attribute {name!r}")
