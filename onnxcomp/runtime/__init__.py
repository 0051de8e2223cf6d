"""Running ORT training graphs: session options with onnxcomp's PyOps, measurement, training."""
from __future__ import annotations

from typing import Any

from . import lean_import

# The training API does not need torch; onnxruntime's own __init__ would import it (see lean_import).
lean_import.install()

# Lazy re-exports: importing onnxcomp.runtime (e.g. for codec_ops) must not pull in onnxruntime.
# The functions measure() and train() are NOT re-exported: they share their names with submodules,
# and importing a submodule rebinds the package attribute to the module. Use
# `from onnxcomp.runtime.measure import measure` / `from onnxcomp.runtime.train import train`.
_EXPORTS = {
    "RuntimeSettings": "onnxcomp.runtime.session",
    "session_options": "onnxcomp.runtime.session",
    "MeasureResult": "onnxcomp.runtime.measure",
    "TrainResult": "onnxcomp.runtime.train",
    # One training session and step (PyOps registered, op errors guarded, adaptive bounds): for your own loop.
    "TrainingSession": "onnxcomp.runtime.training_session",
    "open_training_session": "onnxcomp.runtime.training_session",
    # Op failures inside ORT surface through these (see op_errors): wrap your module, or call raise_pending().
    "GuardedModule": "onnxcomp.runtime.op_errors",
    "guarded_step": "onnxcomp.runtime.op_errors",
    "raise_pending": "onnxcomp.runtime.op_errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'onnxcomp.runtime' has no attribute {name!r}")
