"""Train an ORT training graph (original or onnxcomp-transformed) with the ORT training API."""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.data import GraphData, digits_dataset, graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import TrainingSession, loss_value, open_training_session

DATA_SOURCES = ("synthetic", "digits", "text")


@dataclass
class TrainResult:
    losses: list[float]
    steps: int
    time_s: float
    step_time_s: float
    accuracy: float | None
    accuracy_source: str
    accuracy_history: list[tuple[int, float]]
    data: str
    settings: dict[str, Any]
    model: str
    seed: int
    learning_rate: float | None
    parameters: np.ndarray | None = field(default=None, repr=False)
    # Linear warm-up steps of the linear warm-up/decay schedule (None: constant learning rate).
    warmup_steps: int | None = None
    bounds: dict[str, Any] | None = None  # the error-bound controller's summary, when the graph has one
    # Mean cross-entropy of the eval model's logits on the held-out batches, at the same steps as accuracy.
    val_loss_history: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (parameters left out: compare them through .parameters)."""
        return {
            "losses": self.losses, "steps": self.steps, "time_s": self.time_s,
            "step_time_s": self.step_time_s, "accuracy": self.accuracy,
            "accuracy_source": self.accuracy_source,
            "accuracy_history": [list(p) for p in self.accuracy_history], "data": self.data,
            "settings": self.settings, "model": self.model, "seed": self.seed,
            "learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps, "bounds": self.bounds,
            "val_loss_history": [list(p) for p in self.val_loss_history],
        }


Batches = Iterator[tuple[np.ndarray, np.ndarray]]


@dataclass
class _Evaluation:
    """Where accuracy comes from: the repaired eval model (None: accuracy unavailable, and why)."""

    path: Path | None
    source: str


@dataclass
class _Loop:
    """What the step loop produced."""

    losses: list[float]
    times: list[float]
    history: list[tuple[int, float]]
    total_s: float
    val_losses: list[tuple[int, float]] = field(default_factory=list)


def train(
    artifact_dir: str | os.PathLike,
    *,
    model: str | os.PathLike | None = None,
    steps: int,
    data: str = "synthetic",
    settings: RuntimeSettings | None = None,
    seed: int = 0,
    eval_every: int | None = None,
    progress: bool = True,
    learning_rate: float | None = None,
    return_parameters: bool = False,
    bound_control: dict[str, Any] | None = None,
    save_dir: str | os.PathLike | None = None,
    warmup_steps: int | None = None,
) -> TrainResult:
    """Train `steps` steps on `data` ("synthetic" or "digits"); evaluate test accuracy at the end and
    every `eval_every` steps when the data has real labels. Same seed and settings give bit-identical
    losses and parameters. learning_rate: None keeps the optimizer model's default.
    bound_control: options for the adaptive error-bound controller (a, sigma_frac, window, static), used
    when the graph holds error-bounded encoders. data may also be a .npz file (arrays x, y) or a directory
    of images per class (onnxcomp.runtime.user_data). save_dir: checkpoint, optimizer state, step count and
    error bounds are written there at the end; a run that finds a save there resumes from it (same batches
    as an uninterrupted run with the same seed). warmup_steps: schedule the learning rate (LinearWarmupDecay):
    linearly up to the learning rate over ``warmup_steps`` steps, then linearly down to ~0 at the last step
    (a resumed run counts the saved steps in, so its schedule ends at saved + ``steps``)."""
    from onnxcomp.load import resolve_training_run
    from onnxcomp.runtime.resume import load_progress, save_progress

    _check_arguments(data, steps, eval_every, warmup_steps)
    artifact_dir = Path(artifact_dir).resolve()
    settings = settings or RuntimeSettings()
    model_path = resolve_training_run(artifact_dir, model)
    resume = load_progress(save_dir, model_path)
    done = int(resume["step"]) if resume else 0  # steps a saved run already took

    with tempfile.TemporaryDirectory(prefix="onnxcomp-train-") as tmp:
        evaluation = _evaluation_model(artifact_dir, data, Path(tmp))
        session, evaluation = _open_session(
            artifact_dir, model_path, evaluation, resume, settings=settings, seed=seed,
            learning_rate=learning_rate, bound_control=bound_control)
        if warmup_steps is not None:
            _schedule(session, warmup_steps, total=done + steps, done=done)
        spec = graph_data(artifact_dir, model_path, list(session.module.input_names()))
        batches, test, evaluation = _data(data, spec, seed, evaluation)
        for _ in range(done):  # resuming: continue the batch stream where the saved run stopped
            next(batches)
        _warm_up_codecs(model_path)
        loop = _run_steps(session, batches, test, evaluation, first=done + 1, last=done + steps,
                          eval_every=eval_every, progress=progress)
        params = session.parameters() if return_parameters else None
        summary = session.bounds_summary()
        if save_dir is not None:
            from onnxcomp.runtime import bounds as run_bounds

            save_progress(save_dir, session.state, step=done + steps, model_path=model_path, seed=seed, data=data,
                          bounds=run_bounds.bounds())
        session.close()  # release the sessions before the temp dir (holding the eval model) goes away

    return TrainResult(
        losses=loop.losses, steps=steps, time_s=loop.total_s, step_time_s=statistics.median(loop.times),
        accuracy=loop.history[-1][1] if loop.history else None, accuracy_source=evaluation.source,
        accuracy_history=loop.history, data=data, settings=settings.to_dict(), model=str(model_path),
        seed=seed, learning_rate=learning_rate, parameters=params,
        bounds=summary, val_loss_history=loop.val_losses, warmup_steps=warmup_steps,
    )


def _check_arguments(data: str, steps: int, eval_every: int | None, warmup_steps: int | None) -> None:
    if data not in DATA_SOURCES and not Path(data).exists():
        raise OnnxcompError(f"unknown data source {data!r}; use one of {list(DATA_SOURCES)}, a .npz file with x "
                            "and y arrays, or a directory of images per class")
    if steps < 1:
        raise OnnxcompError(f"train needs steps >= 1 (got {steps})")
    if eval_every is not None and eval_every < 1:
        raise OnnxcompError(f"eval_every must be >= 1 or None (got {eval_every})")
    if warmup_steps is not None and not 0 <= warmup_steps < steps:
        raise OnnxcompError(f"warmup_steps must be in [0, steps) = [0, {steps}) (got {warmup_steps}); None keeps "
                            "the learning rate constant")


class LinearWarmupDecay:
    """Learning rate of step k (1-based) of ``total``: ``peak``·k/warmup up to ``warmup``, then linearly down,
    ``peak``·(total − k + 1)/(total − warmup), to peak/(total − warmup) at the last step. Not ORT's
    LinearLRScheduler: in onnxruntime-training 1.19.2 its Python binding swaps the two step counts
    (LinearLRScheduler(opt, 3, 10, lr) warms up over 10 steps), so the schedule is set here, step by step."""

    def __init__(self, optimizer: Any, peak: float, warmup: int, total: int, done: int = 0) -> None:
        self.optimizer, self.peak, self.warmup, self.total = optimizer, peak, warmup, total
        self.next_step = done + 1
        self._apply()

    def rate(self, step: int) -> float:
        if step <= self.warmup:
            return self.peak * step / self.warmup
        return self.peak * (self.total - step + 1) / (self.total - self.warmup)

    def _apply(self) -> None:
        if self.next_step <= self.total:
            self.optimizer.set_learning_rate(self.rate(self.next_step))

    def step(self) -> None:
        """After an optimizer step: the next step's rate."""
        self.next_step += 1
        self._apply()


def _schedule(session: TrainingSession, warmup_steps: int, *, total: int, done: int) -> None:
    """Attach the linear warm-up/decay schedule, peaking at the optimizer's learning rate, past the ``done``
    steps of a resumed run."""
    session.scheduler = LinearWarmupDecay(session.optimizer, session.optimizer.get_learning_rate(),
                                          warmup_steps, total, done)


def _evaluation_model(artifact_dir: Path, data: str, tmp: Path) -> _Evaluation:
    """Accuracy: prefer the (repaired) eval model on a held-out split, run through Module.eval() so it sees
    the live parameters. If it is missing or cannot be repaired, accuracy is reported as unavailable rather
    than guessed from train batches: the stock training graph exposes only the loss, not logits."""
    from onnxcomp.runtime.eval_model import evaluation_model

    if data == "synthetic":
        return _Evaluation(None, "none: synthetic data has random labels")
    derived = tmp / "eval_model.onnx"
    problem = evaluation_model(artifact_dir / "eval_model.onnx", derived)
    if problem is not None:
        return _Evaluation(None, f"unavailable: {problem}")
    return _Evaluation(derived, "")


def _open_session(artifact_dir: Path, model_path: Path, evaluation: _Evaluation, resume: dict[str, Any] | None,
                  **options: Any) -> tuple[TrainingSession, _Evaluation]:
    """The training session (with the eval model when there is one, the adaptive bound controller, and a
    resumed run's checkpoint and bounds). An eval model ORT cannot load costs the accuracy, not the run."""
    checkpoint = Path(resume["checkpoint"]) if resume else artifact_dir / "checkpoint"

    def open_with(eval_model: Path | None) -> TrainingSession:
        return open_training_session(model_path, checkpoint, artifact_dir / "optimizer_model.onnx",
                                     eval_model=eval_model, adaptive=True,
                                     bounds=resume.get("bounds", {}) if resume else None, **options)

    try:
        return open_with(evaluation.path), evaluation
    except Exception as exc:
        if evaluation.path is None:
            raise OnnxcompError(f"ONNX Runtime cannot load {model_path}: {exc}") from exc
        evaluation = _Evaluation(None, f"unavailable: eval model does not load ({str(exc).splitlines()[0][:200]})")
    try:
        return open_with(None), evaluation
    except Exception as exc:
        raise OnnxcompError(f"ONNX Runtime cannot load {model_path}: {exc}") from exc


def _data(data: str, spec: GraphData, seed: int, evaluation: _Evaluation
          ) -> tuple[Batches, list[tuple[np.ndarray, np.ndarray]], _Evaluation]:
    """The seeded training batch stream, the held-out test batches, and where accuracy comes from."""
    from onnxcomp.runtime.user_data import is_user_data, load_user_dataset

    if data == "synthetic":
        return synthetic_batches(spec.image.shape, spec.classes, seed, spec.image.dtype), [], evaluation
    if data == "digits":
        dataset = digits_dataset(spec.image.shape, spec.classes)
        test = list(dataset.test_batches())
        what = f"digits test split ({len(test) * spec.batch} samples)"
    elif data == "text":   # the character LM: the stdlib corpus, its last tenth held out
        from onnxcomp.runtime.text_data import text_dataset

        dataset = text_dataset(spec.image.shape, spec.classes)
        test = list(dataset.test_batches())
        what = f"stdlib text validation split ({len(test) * spec.batch} windows)"
    elif is_user_data(data):
        dataset = load_user_dataset(data, spec.image.shape, spec.classes)
        test = list(dataset.test_batches())
        what = f"a held-out 20 % of {data} ({len(test) * spec.batch} samples)"
        if not test:
            evaluation = _Evaluation(None, f"unavailable: the held-out 20 % of {data} is less than one batch")
    else:  # unreachable: _check_arguments refused it
        raise OnnxcompError(f"unknown data source {data!r}")
    if evaluation.path is not None:
        evaluation = _Evaluation(evaluation.path, f"eval model on {what}")
    return dataset.train_batches(seed), test, evaluation


def _warm_up_codecs(model_path: Path) -> None:
    """Load (or, without a cache, compile) the kernels of the codecs the graph uses now, not in the first
    step; only those (AOT-compiled or NumPy by default: no graph's process imports numba, custom_ops/cpu)."""
    from onnxcomp.runtime._measure_worker import _load_codec_kernels

    _load_codec_kernels(model_path)


def _run_steps(session: TrainingSession, batches: Batches, test: list[tuple[np.ndarray, np.ndarray]],
               evaluation: _Evaluation, *, first: int, last: int, eval_every: int | None,
               progress: bool) -> _Loop:
    """Steps ``first``..``last`` (their numbers drive the bound controller), timed one by one; accuracy on
    ``test`` every ``eval_every`` steps and after the last one, when there is an eval model."""
    from tqdm.auto import tqdm

    loop = _Loop([], [], [], 0.0)
    start = time.perf_counter()
    bar = tqdm(range(first, last + 1), disable=not progress, desc="train", unit="step")
    for step in bar:
        x, y = next(batches)
        t0 = time.perf_counter()
        loss = session.step(x, y, step=step)  # an onnxcomp op that failed inside ORT raises OpError here
        loop.times.append(time.perf_counter() - t0)
        loop.losses.append(loss_value(loss))
        bar.set_postfix(loss=f"{loop.losses[-1]:.4f}")
        if evaluation.path is not None and ((eval_every and step % eval_every == 0) or step == last):
            accuracy, val_loss = _evaluate(session, test)
            loop.history.append((step, accuracy))
            loop.val_losses.append((step, val_loss))
            bar.set_postfix(loss=f"{loop.losses[-1]:.4f}", acc=f"{loop.history[-1][1]:.3f}")
    bar.close()
    loop.total_s = time.perf_counter() - start
    return loop


def _evaluate(session: TrainingSession, batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of the eval model's logits over ``batches`` (labels: one per row of
    logits, so an LM's [batch·seq] labels count per character)."""
    correct = total = 0
    nll = 0.0
    with session.eval_mode() as run:
        for x, y in batches:
            logits = np.asarray(run(x, y)[-1], dtype=np.float64).reshape(len(y), -1)
            correct += int((np.argmax(logits, axis=-1) == y).sum())
            shifted = logits - logits.max(axis=-1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
            nll -= float(log_probs[np.arange(len(y)), y].sum())
            total += len(y)
    return correct / total, nll / total
