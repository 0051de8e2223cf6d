"""One ORT training session and one training step, shared by every onnxcomp loop.

`onnxcomp train`, the `measure` worker, calibration's training profile, `onnxcomp.torch.Trainer` and the
benchmark tools all open a session with `open_training_session` and step it with `TrainingSession.step`:

    session = open_training_session(model_path, artifact_dir / "checkpoint", artifact_dir / "optimizer_model.onnx",
                                    settings=RuntimeSettings(), seed=0)
    for x, y in batches:
        loss = session.step(x, y)

What every loop needs and must not get wrong is therefore in one place:

* session options from `runtime.session` (onnxcomp's PyOps registered, execution order, arena/mem pattern);
* ORT's global seed set after the session exists (Dropout masks: same seed, same losses across graphs);
* each forward/backward guarded (`op_errors.GuardedModule`): an onnxcomp op that failed inside ORT raises
  `OpError` at the end of the step instead of returning placeholder outputs;
* the adaptive error-bound controller's hooks around the forward/backward (`adaptive.AdaptiveBounds`), before
  the optimizer step resets the gradients it reads;
* the optimizer step and `lazy_reset_grad` after it.

Peak measurement (`_measure_worker`) wraps `step` in its /proc readings, so a step measured there is exactly
the step every other loop takes.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the module stays importable without onnxruntime (Trainer imports loss_value)
    from onnxcomp.runtime.session import RuntimeSettings


@dataclass
class TrainingSession:
    """An open ORT training Module with its optimizer, checkpoint state and (optional) bound controller."""

    model_path: Path
    state: Any        # onnxruntime.training.api.CheckpointState
    module: Any       # onnxruntime.training.api.Module
    optimizer: Any    # onnxruntime.training.api.Optimizer
    bounds: Any       # adaptive.AdaptiveBounds, or None: bounds stay as set (runtime.bounds)
    scheduler: Any = None  # onnxruntime.training.api.LinearLRScheduler, stepped after each optimizer step

    def __post_init__(self) -> None:
        from onnxcomp.runtime.op_errors import GuardedModule

        self._guarded = GuardedModule(self.module)

    def forward_backward(self, *inputs: Any, step: int | None = None) -> Any:
        """``module(*inputs)`` (forward and backward, gradients accumulated), guarded, with the bound
        controller's hooks around it. ``step``: the training step's number for the controller (default: the
        session's own count, from 1)."""
        if self.bounds is None:
            return self._guarded(*inputs)
        return self.bounds.step(self._guarded, *inputs, step=step)

    def step(self, *inputs: Any, step: int | None = None) -> Any:
        """One training step: forward/backward (``forward_backward``), optimizer step, gradients reset.
        Returns the module's outputs (the loss)."""
        out = self.forward_backward(*inputs, step=step)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.module.lazy_reset_grad()
        return out

    @contextmanager
    def eval_mode(self) -> Iterator[Callable[..., Any]]:
        """``with session.eval_mode() as run: outputs = run(x, y)``: the eval model's outputs (guarded); the
        module is back in training mode afterwards."""
        self.module.eval()
        try:
            yield self._guarded
        finally:
            self.module.train()

    def bounds_summary(self) -> dict[str, Any] | None:
        """The bound controller's summary (None when the graph has no error-bounded encoders)."""
        return self.bounds.summary() if self.bounds is not None else None

    def parameters(self, trainable_only: bool = False) -> Any:
        """Every parameter, one contiguous numpy copy (ORT's order)."""
        return self.module.get_contiguous_parameters(trainable_only=trainable_only).numpy().copy()

    def close(self) -> None:
        """Drop the references to ORT's objects (the sessions go with the last one)."""
        self.module = self.optimizer = self.state = self._guarded = None  # type: ignore[assignment]
        self.scheduler = None
        self.bounds = None


def open_training_session(
    model_path: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str],
    optimizer_model: str | os.PathLike[str],
    *,
    settings: RuntimeSettings | None = None,
    eval_model: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    learning_rate: float | None = None,
    adaptive: bool = False,
    bound_control: dict[str, Any] | None = None,
    bounds: dict[str, float] | None = None,
    session_options: Any = None,
) -> TrainingSession:
    """Load ``checkpoint`` and build the training Module on ``model_path`` (with ``eval_model`` when given) and
    the Optimizer on ``optimizer_model``, with ``settings``' session options (default: measure's defaults).

    seed: ORT's global seed, set once the session exists (None leaves it alone). learning_rate: None keeps
    the optimizer model's. adaptive: run the adaptive error-bound controller (``bound_control``: its options,
    see controller.AdaptiveBoundController) when the graph has error-bounded encoders. bounds: run-time error
    bounds (encoder key → eb) set last, after the controller's starting bounds (a resumed run's, or fixed
    ones for a measurement). session_options: a ready ``onnxruntime.SessionOptions`` used instead of
    ``settings``' (ORT's own defaults for comparison, or a smoke test of raw artifacts without onnxcomp's ops).
    ORT's load errors propagate unchanged (callers add their context)."""
    from onnxruntime.training import api

    from onnxcomp.runtime import bounds as run_bounds
    from onnxcomp.runtime.session import RuntimeSettings

    model_path = Path(model_path)
    state = api.CheckpointState.load_checkpoint(str(checkpoint))
    if session_options is None:
        session_options = (settings or RuntimeSettings()).session_options()
    module = api.Module(str(model_path), state, str(eval_model) if eval_model is not None else None, "cpu",
                        session_options)
    optimizer = api.Optimizer(str(optimizer_model), module)
    if seed is not None:
        import onnxruntime as ort

        ort.set_seed(seed)  # Dropout draws from ORT's global Philox generator
    if learning_rate is not None:
        optimizer.set_learning_rate(learning_rate)
    module.train()
    controller = None
    if adaptive:
        from onnxcomp.runtime.adaptive import AdaptiveBounds

        controller = AdaptiveBounds(model_path, state, **(bound_control or {}))
    for key, eb in (bounds or {}).items():
        run_bounds.set_bound(key, float(eb))
    return TrainingSession(model_path, state, module, optimizer, controller)


def open_artifact_session(artifact_dir: str | os.PathLike[str], model_path: str | os.PathLike[str] | None = None,
                          **options: Any) -> TrainingSession:
    """``open_training_session`` on an artifact directory's checkpoint and optimizer model (the training graph
    ``model_path``, default the directory's training_model.onnx)."""
    art = Path(artifact_dir)
    return open_training_session(model_path if model_path is not None else art / "training_model.onnx",
                                 art / "checkpoint", art / "optimizer_model.onnx", **options)


def loss_value(outputs: Any) -> float:
    """The loss as a float from a training or eval step's outputs (a scalar, or the first of several)."""
    import numpy as np

    out = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    return float(np.asarray(out).reshape(-1)[0])
