"""Train an ORT training graph (original or onnxcomp-transformed) with the ORT training API."""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.data import digits_dataset, graph_data, synthetic_batches
from onnxcomp.runtime.measure import _resolve_model
from onnxcomp.runtime.op_errors import guarded_step
from onnxcomp.runtime.session import RuntimeSettings

DATA_SOURCES = ("synthetic", "digits")


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
    bounds: dict[str, Any] | None = None  # the error-bound controller's summary, when the graph has one

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (parameters left out: compare them through .parameters)."""
        return {
            "losses": self.losses, "steps": self.steps, "time_s": self.time_s,
            "step_time_s": self.step_time_s, "accuracy": self.accuracy,
            "accuracy_source": self.accuracy_source,
            "accuracy_history": [list(p) for p in self.accuracy_history], "data": self.data,
            "settings": self.settings, "model": self.model, "seed": self.seed,
            "learning_rate": self.learning_rate, "bounds": self.bounds,
        }


def _derive_eval_model(eval_path: Path, out_path: Path) -> bool:
    """Write a usable copy of generate_artifacts' eval model that also outputs the logits.

    The stock eval model is unloadable for BatchNorm nets: its BatchNormalization nodes keep the
    running-stat outputs while training_mode=0 ("number of op outputs should be 1"). Dropping those
    unused outputs fixes it; inference-mode BN then uses the running statistics, which ORT's training
    graph does update in the checkpoint state. Returns False if no logits can be identified.
    """
    model = onnx.load(str(eval_path))
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    logits = None
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            training = next((a.i for a in node.attribute if a.name == "training_mode"), 0)
            if not training and len(node.output) > 1 and not (set(node.output[1:]) & used):
                del node.output[1:]
        if node.op_type == "SoftmaxCrossEntropyLoss":
            logits = node.input[0]
    if logits is None:
        return False
    if logits not in {o.name for o in model.graph.output}:
        model.graph.output.append(onnx.helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(out_path))
    return True


def _evaluate(module: Any, batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
    module.eval()
    correct = total = 0
    try:
        for x, y in batches:
            with guarded_step():
                outputs = module(x, y)
            logits = outputs[-1]
            correct += int((np.argmax(logits, axis=-1) == y).sum())
            total += len(y)
    finally:
        module.train()
    return correct / total


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
) -> TrainResult:
    """Train `steps` steps on `data` ("synthetic" or "digits"); evaluate test accuracy at the end and
    every `eval_every` steps when the data has real labels. Same seed and settings give bit-identical
    losses and parameters. learning_rate: None keeps the optimizer model's default.
    bound_control: options for the adaptive error-bound controller (a, sigma_frac, window, static), used
    when the graph holds error-bounded encoders. data may also be a .npz file (arrays x, y) or a directory
    of images per class (onnxcomp.runtime.user_data). save_dir: checkpoint, optimizer state, step count and
    error bounds are written there at the end; a run that finds a save there resumes from it (same batches
    as an uninterrupted run with the same seed)."""
    from onnxruntime.training import api
    from tqdm.auto import tqdm

    from onnxcomp.runtime.resume import load_progress, save_progress
    from onnxcomp.runtime.user_data import is_user_data, load_user_dataset

    if data not in DATA_SOURCES and not Path(data).exists():
        raise OnnxcompError(f"unknown data source {data!r}; use one of {list(DATA_SOURCES)}, a .npz file with x "
                            "and y arrays, or a directory of images per class")
    if steps < 1:
        raise OnnxcompError(f"train needs steps >= 1 (got {steps})")
    if eval_every is not None and eval_every < 1:
        raise OnnxcompError(f"eval_every must be >= 1 or None (got {eval_every})")
    artifact_dir = Path(artifact_dir).resolve()
    settings = settings or RuntimeSettings()
    model_path = _resolve_model(artifact_dir, model)
    eval_src = artifact_dir / "eval_model.onnx"
    resume = load_progress(save_dir, model_path)
    checkpoint = Path(resume["checkpoint"]) if resume else artifact_dir / "checkpoint"
    done = int(resume["step"]) if resume else 0  # steps a saved run already took

    with tempfile.TemporaryDirectory(prefix="onnxcomp-train-") as tmp:
        state = api.CheckpointState.load_checkpoint(str(checkpoint))
        so = settings.session_options()
        # Accuracy: prefer the (repaired) eval model on a held-out split, run through Module.eval() so
        # it sees the live parameters. If it is missing or does not load, accuracy is reported as
        # unavailable rather than guessed from train batches: the stock training graph exposes only
        # the loss, not logits.
        eval_path: Path | None = None
        accuracy_source = "none: synthetic data has random labels"
        if data != "synthetic":
            derived = Path(tmp) / "eval_model.onnx"
            if not eval_src.exists():
                accuracy_source = f"unavailable: {eval_src} missing"
            elif not _derive_eval_model(eval_src, derived):
                accuracy_source = f"unavailable: no SoftmaxCrossEntropyLoss logits in {eval_src}"
            else:
                eval_path = derived
        try:
            module = api.Module(str(model_path), state, str(eval_path) if eval_path else None, "cpu", so)
        except Exception as exc:
            if eval_path is None:
                raise OnnxcompError(f"ONNX Runtime cannot load {model_path}: {exc}") from exc
            accuracy_source = f"unavailable: eval model does not load ({str(exc).splitlines()[0][:200]})"
            eval_path = None
            state = api.CheckpointState.load_checkpoint(str(checkpoint))
            try:
                module = api.Module(str(model_path), state, None, "cpu", so)
            except Exception as exc2:
                raise OnnxcompError(f"ONNX Runtime cannot load {model_path}: {exc2}") from exc2
        optimizer = api.Optimizer(str(artifact_dir / "optimizer_model.onnx"), module)
        # Dropout draws from ORT's global Philox generator; reseeding it makes runs (and a transformed
        # graph against its original) comparable bit for bit.
        import onnxruntime as ort

        ort.set_seed(seed)
        if learning_rate is not None:
            optimizer.set_learning_rate(learning_rate)
        module.train()
        from onnxcomp.runtime.controller import AdaptiveBoundController

        controller = AdaptiveBoundController.for_model(model_path, **(bound_control or {}))
        if resume:
            from onnxcomp.runtime import bounds as run_bounds

            for key, eb in resume.get("bounds", {}).items():
                run_bounds.set_bound(key, float(eb))
        spec = graph_data(artifact_dir, model_path, list(module.input_names()))

        if data == "digits":
            dataset = digits_dataset(spec.image.shape, spec.classes)
            batches = dataset.train_batches(seed)
            test = list(dataset.test_batches())
            if eval_path is not None:
                accuracy_source = f"eval model on digits test split ({len(test) * spec.batch} samples)"
        elif is_user_data(data):
            dataset = load_user_dataset(data, spec.image.shape, spec.classes)
            batches = dataset.train_batches(seed)
            test = list(dataset.test_batches())
            if not test:
                accuracy_source, eval_path = f"unavailable: the held-out 20 % of {data} is less than one batch", None
            elif eval_path is not None:
                accuracy_source = f"eval model on a held-out 20 % of {data} ({len(test) * spec.batch} samples)"
        else:
            batches = synthetic_batches(spec.image.shape, spec.classes, seed, spec.image.dtype)
            test = []
        for _ in range(done):  # resuming: continue the batch stream where the saved run stopped
            next(batches)

        from onnxcomp.custom_ops import cpu

        cpu.warm_up()  # load (or, without a cache, compile) the codec kernels now, not in the first step
        losses: list[float] = []
        times: list[float] = []
        history: list[tuple[int, float]] = []
        start = time.perf_counter()
        bar = tqdm(range(done + 1, done + steps + 1), disable=not progress, desc="train", unit="step")
        for step in bar:
            x, y = next(batches)
            t0 = time.perf_counter()
            if controller is not None:
                controller.before_step(step)
            with guarded_step():  # an onnxcomp op that failed inside ORT raises OpError here
                loss = module(x, y)
            if controller is not None:
                controller.after_step(step, state.parameters)
            optimizer.step()
            module.lazy_reset_grad()
            times.append(time.perf_counter() - t0)
            loss_value = float(loss[0] if isinstance(loss, (list, tuple)) else loss)
            losses.append(loss_value)
            bar.set_postfix(loss=f"{loss_value:.4f}")
            if eval_path is not None and ((eval_every and step % eval_every == 0) or step == done + steps):
                history.append((step, _evaluate(module, test)))
                bar.set_postfix(loss=f"{loss_value:.4f}", acc=f"{history[-1][1]:.3f}")
        bar.close()
        total = time.perf_counter() - start
        params = module.get_contiguous_parameters(trainable_only=False).numpy().copy() if return_parameters else None
        # Release the sessions before the temp dir (holding the eval model) goes away.
        summary = controller.summary() if controller is not None else None
        if save_dir is not None:
            from onnxcomp.runtime import bounds as run_bounds

            save_progress(save_dir, state, step=done + steps, model_path=model_path, seed=seed, data=data,
                          bounds=run_bounds.bounds())
        del optimizer, module, state

    return TrainResult(
        losses=losses, steps=steps, time_s=total, step_time_s=statistics.median(times),
        accuracy=history[-1][1] if history else None, accuracy_source=accuracy_source,
        accuracy_history=history, data=data, settings=settings.to_dict(), model=str(model_path),
        seed=seed, learning_rate=learning_rate, parameters=params,
        bounds=summary,
    )
