"""COMET's adaptive error bounds in your own ORT training loop: one call per step.

A graph transformed with an error-bounded policy (comet) starts from the bound in its encoders' attributes.
`onnxcomp train`, `measure` and `onnxcomp.torch.Trainer` adjust the bounds between steps; in a loop of your own
the bounds stay static unless you route the training step through `AdaptiveBounds.step`:

    from onnxcomp.runtime.adaptive import AdaptiveBounds
    from onnxcomp.runtime.session import session_options
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint("art/checkpoint")
    module = api.Module("art/comet.onnx", state, None, "cpu", session_options())
    optimizer = api.Optimizer("art/optimizer_model.onnx", module)
    bounds = AdaptiveBounds("art/comet.onnx", state)
    for x, y in batches:
        loss = bounds.step(module, x, y)        # instead of module(x, y)
        optimizer.step()
        module.lazy_reset_grad()

For a graph without error-bounded encoders `step` is just `module(x, y)`. onnxcomp's own loops get this (and
the op-error guard) from `training_session.open_training_session(..., adaptive=True)`, which does the above.
"""
from __future__ import annotations

import os
from typing import Any

from .controller import AdaptiveBoundController


class AdaptiveBounds:
    """Wrap ``module(*inputs)`` with the controller's before/after hooks (statistics collection and the
    bound update read the gradients, so call it before ``optimizer.step()`` resets them)."""

    def __init__(self, training_model: str | os.PathLike[str], state: Any, **controller_options: Any) -> None:
        self.state = state
        self.controller = AdaptiveBoundController.for_model(str(training_model), **controller_options)
        self.steps = 0

    @property
    def active(self) -> bool:
        """Whether the graph has error-bounded encoders whose bounds this adjusts."""
        return self.controller is not None and not self.controller.static

    def step(self, module: Any, *inputs: Any, step: int | None = None) -> Any:
        """One training step: ``module(*inputs)`` with the bounds collected/updated around it. ``step``: the
        step's number when the caller counts (a resumed run continues its count); default: one more."""
        self.steps = self.steps + 1 if step is None else step
        if self.controller is None:
            return module(*inputs)
        self.controller.before_step(self.steps)
        out = module(*inputs)
        self.controller.after_step(self.steps, self.state.parameters)
        return out

    def summary(self) -> dict[str, Any] | None:
        return None if self.controller is None else self.controller.summary()
