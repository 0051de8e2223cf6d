"""PyTorch entry points. Importing ``onnxcomp`` never imports torch; importing this package does, lazily."""
from __future__ import annotations

from typing import Any

__all__ = ["compress_activations", "POLICIES"]


def __getattr__(name: str) -> Any:
    if name in ("compress_activations", "POLICIES", "Policy"):
        from . import hooks

        return getattr(hooks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
