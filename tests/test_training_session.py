"""The one training session and step every onnxcomp loop uses (runtime/training_session.py): the same losses
and parameters as a plain ORT training loop, bit for bit; the bound controller's hooks around the forward and
backward, before the optimizer; op failures raised from the step; eval mode restored."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from onnxcomp.errors import OpError
from onnxcomp.runtime import bounds as run_bounds
from onnxcomp.runtime import op_errors
from onnxcomp.runtime.eval_model import evaluation_model
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import TrainingSession, loss_value, open_artifact_session


def _plain_ort_loop(art: Path, steps: int, seed: int) -> tuple[list[float], np.ndarray]:
    """What every loop wrote out by hand before the shared session existed."""
    import onnxruntime as ort
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = api.Module(str(art / "training_model.onnx"), state, None, "cpu", RuntimeSettings().session_options())
    optimizer = api.Optimizer(str(art / "optimizer_model.onnx"), module)
    ort.set_seed(seed)
    module.train()
    spec = graph_data(art, art / "training_model.onnx", list(module.input_names()))
    batches = synthetic_batches(spec.image.shape, spec.classes, seed, spec.image.dtype)
    losses = []
    for _ in range(steps):
        x, y = next(batches)
        losses.append(float(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses, module.get_contiguous_parameters(trainable_only=False).numpy().copy()


def test_session_step_matches_a_plain_ort_loop_bit_for_bit(small_artifacts: Path) -> None:
    expected_losses, expected_params = _plain_ort_loop(small_artifacts, steps=3, seed=5)
    session = open_artifact_session(small_artifacts, settings=RuntimeSettings(), seed=5)
    spec = graph_data(small_artifacts, small_artifacts / "training_model.onnx", list(session.module.input_names()))
    batches = synthetic_batches(spec.image.shape, spec.classes, 5, spec.image.dtype)
    losses = [loss_value(session.step(*next(batches))) for _ in range(3)]
    assert losses == expected_losses and len(set(losses)) == 3
    assert session.parameters().tobytes() == expected_params.tobytes()
    assert session.bounds_summary() is None  # adaptive off: no controller
    session.close()


def test_session_with_eval_model_evaluates_and_returns_to_training(small_artifacts: Path, tmp_path: Path) -> None:
    # onnxblock's eval model does not load as it is (BatchNorm outputs): the one repair makes it loadable.
    assert evaluation_model(small_artifacts / "eval_model.onnx", tmp_path / "eval.onnx") is None
    session = open_artifact_session(small_artifacts, eval_model=tmp_path / "eval.onnx",
                                    adaptive=True, learning_rate=1e-3)
    assert session.bounds is not None and session.bounds_summary() is None  # no error-bounded encoders
    spec = graph_data(small_artifacts, small_artifacts / "training_model.onnx", list(session.module.input_names()))
    x, y = next(synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype))
    with session.eval_mode() as run:
        outputs = run(x, y)
    assert np.isfinite(loss_value(outputs)) and outputs[-1].shape == (spec.batch, spec.classes)  # the logits
    assert session.module.training
    assert np.isfinite(loss_value(session.step(x, y)))


def test_run_time_bounds_are_set_after_the_session(small_artifacts: Path) -> None:
    run_bounds.reset()
    open_artifact_session(small_artifacts, bounds={"enc0": 0.25}).close()
    assert run_bounds.bound("enc0", 1.0) == 0.25
    run_bounds.reset()


class _Recorder:
    """Stands in for ORT's Module/Optimizer and the bound controller, logging the order of calls."""

    def __init__(self, fail_op: bool = False) -> None:
        self.log: list[Any] = []
        self.fail_op = fail_op
        self.training = True

    # Module
    def __call__(self, *inputs: Any) -> Any:
        self.log.append(("forward_backward", self.training))
        if self.fail_op:  # what the PyOp hook does when an op raises inside ORT
            op_errors.record("OnnxcompDecode_sz", "t0", IndexError("injected"))
        return np.float32(0.5)

    def lazy_reset_grad(self) -> None:
        self.log.append("reset_grad")

    def eval(self) -> None:
        self.training = False

    def train(self) -> None:
        self.training = True


class _Optimizer:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def step(self) -> None:
        self.log.append("optimizer")


class _Bounds:
    def __init__(self, log: list[Any]) -> None:
        self.log, self.steps = log, 0

    def step(self, module: Any, *inputs: Any, step: int | None = None) -> Any:
        self.steps = self.steps + 1 if step is None else step
        self.log.append(("before", self.steps))
        out = module(*inputs)
        self.log.append(("after", self.steps))
        return out

    def summary(self) -> dict[str, Any]:
        return {"steps": self.steps}


def test_step_order_hooks_around_forward_then_optimizer_then_reset() -> None:
    module = _Recorder()
    session = TrainingSession(Path("m.onnx"), None, module, _Optimizer(module.log), _Bounds(module.log))
    session.step(1, 2)
    session.step(1, 2, step=7)  # a resumed run numbers its steps
    assert module.log == [("before", 1), ("forward_backward", True), ("after", 1), "optimizer", "reset_grad",
                          ("before", 7), ("forward_backward", True), ("after", 7), "optimizer", "reset_grad"]
    assert session.bounds_summary() == {"steps": 7}


def test_failed_op_raises_from_the_step_and_discards_its_gradients() -> None:
    module = _Recorder(fail_op=True)
    session = TrainingSession(Path("m.onnx"), None, module, _Optimizer(module.log), None)
    with pytest.raises(OpError, match="injected"):
        session.step(1, 2)
    assert module.log == [("forward_backward", True), "reset_grad"]  # no optimizer step on invalid gradients
    with pytest.raises(OpError), session.eval_mode() as run:
        run(1, 2)
    assert module.training  # back in training mode after the failed eval call
