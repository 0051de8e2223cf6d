"""Train a PyTorch module on ONNX Runtime with onnxcomp's compressed activations, and get it back trained.

    trainer = Trainer(model, torch.nn.CrossEntropyLoss(), optimizer="adamw", policy="lossless")
    trainer.fit(train_loader, epochs=3, checkpoint_dir="runs/ckpt")   # resumes if runs/ckpt holds a save
    print(trainer.evaluate(test_loader))                               # {"loss": ..., "accuracy": ...}
    model(x)                                                           # the trained weights are in model now

On the first batch the module is exported with that batch's shape (static shapes: partial batches, e.g. a
DataLoader's last one without drop_last, are skipped and counted), ORT training artifacts are generated
(onnxcomp.from_torch), the training graph is rewritten with ``policy``, and training runs through ORT's
training API with onnxcomp's ops registered and, for error-bounded policies, the adaptive bound controller.
After ``fit`` (and each saved epoch) the trained parameters and BatchNorm statistics are copied into the
module's state_dict.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.training_session import loss_value

_SAVE_FILE = "trainer.json"
_GRAPH_FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "onnxcomp.json")
# policy="auto" without a budget: the exact policy (the budget planner needs a budget to plan for).
AUTO_WITHOUT_BUDGET = "lossless"


@dataclass
class FitResult:
    losses: list[float]
    epochs: int
    steps: int
    skipped_batches: int
    step_time_s: float | None
    policy: str
    bounds: dict[str, Any] | None = None
    history: list[dict[str, float]] = field(default_factory=list)


class Trainer:
    """See the module docstring. ``budget``: a memory budget in bytes for the training step's peak (as
    ``onnxcomp measure`` reports it): with ``policy="auto"`` the budget planner (planner/auto.py) composes
    techniques per tensor to fit it (``policy_options={"exact": True}``: bit-identical ones only) and raises
    when it cannot; with a fixed policy a graph whose planned lower bound does not fit is an error; with
    "rows" it picks the row count. ``policy="auto"`` without a budget means "lossless". ``policy_options``: extra transform options (e.g. {"eb": 1e-3}).
    ``work_dir``: where the artifacts go (default: a temporary directory removed by ``close()``).
    ``smoke_test``: take the first training step of the new graph in a child process first, so a native
    crash of ORT on an unfamiliar graph is reported rather than killing this process."""

    def __init__(self, module: Any, loss_fn: Any = "cross_entropy", optimizer: str = "adamw",
                 policy: str = "lossless", budget: int | None = None, *, lr: float | None = None,
                 policy_options: dict[str, Any] | None = None, work_dir: str | os.PathLike[str] | None = None,
                 progress: bool = True, seed: int = 0, smoke_test: bool = True) -> None:
        import torch

        from onnxcomp.user_model import loss_name

        if not isinstance(module, torch.nn.Module):
            raise OnnxcompError(f"Trainer needs a torch.nn.Module, got {type(module).__name__}")
        self.module = module
        self.loss = loss_name(loss_fn)
        self.optimizer_name = optimizer
        self.policy = policy
        self.budget = budget
        self.lr = lr
        self.policy_options = dict(policy_options or {})
        self.progress = progress
        self.seed = seed
        self.smoke_test = smoke_test
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="onnxcomp-trainer-"))
        self.graph_dir: Path | None = None   # the transformed artifact directory
        self.transform_summary: dict[str, Any] | None = None
        self.batch: int | None = None
        self.step = 0
        self.epoch = 0
        self._session: Any = None

    # ----------------------------------------------------------------------------------- set-up
    def _build(self, x: np.ndarray) -> None:
        import torch

        from onnxcomp.transform import transform
        from onnxcomp.user_model import from_torch

        self.batch = int(x.shape[0])
        art = from_torch(self.module, torch.from_numpy(x), loss=self.loss, optimizer=self.optimizer_name,
                         out_dir=self.work_dir / "artifacts", overwrite=True, smoke_test=self.smoke_test)
        options = dict(self.policy_options)
        candidates = (self.policy,)
        if self.policy == "auto":
            if self.budget is None:
                candidates = (AUTO_WITHOUT_BUDGET,)
            else:
                options.setdefault("budget_bytes", self.budget)
        if self.policy == "rows" and self.budget is not None:
            options.setdefault("rows", "auto")
            options.setdefault("budget_bytes", self.budget)
        fitted = None
        for policy in candidates:
            out = self.work_dir / f"graph-{policy}"
            if out.exists():
                shutil.rmtree(out)
            result = transform(art.out_dir, out, policy, **options)
            need = result.after["lower_bound_bytes"]
            fitted = (policy, out, result.summary())
            # The budget planner has checked its own predicted peak (it raises BudgetError otherwise).
            if self.budget is None or policy == "auto" or need <= self.budget:
                break
        else:
            assert fitted is not None
            raise OnnxcompError(
                f"no policy fits the budget of {self.budget / 2**20:.1f} MiB: {fitted[0]} still needs "
                f"{fitted[2]['after']['lower_bound_bytes'] / 2**20:.1f} MiB (planner lower bound at batch "
                f"{self.batch}); raise the budget or use a smaller batch"
            )
        self.policy, self.graph_dir, self.transform_summary = fitted
        self._open(self.graph_dir / "checkpoint")

    def _open(self, checkpoint: Path, bounds_state: dict[str, float] | None = None) -> None:
        from onnxcomp.runtime.training_session import open_training_session

        assert self.graph_dir is not None
        self.close_session()
        self._session = open_training_session(
            self.graph_dir / "training_model.onnx", checkpoint, self.graph_dir / "optimizer_model.onnx",
            eval_model=self.graph_dir / "eval_model.onnx", learning_rate=self.lr, adaptive=True,
            bounds=bounds_state)

    def close_session(self) -> None:
        self._session = None

    def close(self) -> None:
        """Release the ORT session and remove the temporary work directory (if the Trainer made it)."""
        self.close_session()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ----------------------------------------------------------------------------------- data
    def _arrays(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(batch, (list, tuple)) or len(batch) < 2:
            raise OnnxcompError("the data loader must yield (input, target) pairs")
        x, y = batch[0], batch[1]
        x = np.ascontiguousarray(_numpy(x), dtype=np.float32)
        y = np.ascontiguousarray(_numpy(y), dtype=np.int64 if self.loss == "cross_entropy" else np.float32)
        return x, y

    # ----------------------------------------------------------------------------------- training
    def fit(self, dataloader: Iterable[Any], epochs: int = 1, *,
            checkpoint_dir: str | os.PathLike[str] | None = None) -> FitResult:
        """Train ``epochs`` epochs over ``dataloader`` ((input, target) batches). With ``checkpoint_dir`` the
        state is saved there after every epoch, and a fit that finds a save there resumes from it (its
        completed epochs count towards ``epochs``)."""
        from tqdm.auto import tqdm

        if epochs < 1:
            raise OnnxcompError(f"epochs must be >= 1 (got {epochs})")
        ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if ckpt is not None and (ckpt / _SAVE_FILE).exists() and self._session is None:
            self.load(ckpt)
        losses: list[float] = []
        times: list[float] = []
        skipped = 0
        history: list[dict[str, float]] = []
        while self.epoch < epochs:
            epoch_start = len(losses)
            bar = tqdm(dataloader, disable=not self.progress, desc=f"epoch {self.epoch + 1}/{epochs}",
                       unit="batch", leave=False)
            for batch in bar:
                x, y = self._arrays(batch)
                if self._session is None:
                    self._build(x)
                if x.shape[0] != self.batch:
                    skipped += 1  # the graph has a static batch
                    continue
                t0 = time.perf_counter()
                loss = loss_value(self._session.step(x, y))
                times.append(time.perf_counter() - t0)
                if not math.isfinite(loss):
                    raise OnnxcompError(f"loss became {loss} at step {self.step + 1}; lower the learning rate "
                                        "or try a lossless policy")
                losses.append(loss)
                self.step += 1
                bar.set_postfix(loss=f"{loss:.4f}")
            bar.close()
            if self._session is None:
                raise OnnxcompError("the data loader yielded no batches")
            self.epoch += 1
            if len(losses) > epoch_start:
                history.append({"epoch": self.epoch, "mean_loss": float(np.mean(losses[epoch_start:]))})
            self.sync_module()
            if ckpt is not None:
                self.save(ckpt)
        return FitResult(losses, self.epoch, self.step, skipped, float(np.median(times)) if times else None,
                         self.policy, self._session.bounds_summary() if self._session else None, history)

    def evaluate(self, dataloader: Iterable[Any]) -> dict[str, float]:
        """Mean loss (and accuracy, for cross-entropy) of the ORT eval model over full batches."""
        total_loss, correct, seen, batches = 0.0, 0, 0, 0
        for batch in dataloader:
            x, y = self._arrays(batch)
            if self._session is None:
                raise OnnxcompError("evaluate() needs a trained or loaded Trainer: call fit() or load() first")
            if x.shape[0] != self.batch:
                continue
            loss, out = self._eval_step(x, y)
            total_loss += loss
            batches += 1
            seen += len(y)
            if self.loss == "cross_entropy":
                correct += int((np.argmax(out, axis=-1) == y).sum())
        if batches == 0:
            raise OnnxcompError(f"no full batch of {self.batch} in the evaluation data")
        result = {"loss": total_loss / batches, "samples": float(seen)}
        if self.loss == "cross_entropy":
            result["accuracy"] = correct / seen
        return result

    def predict(self, x: Any) -> np.ndarray:
        """The ORT eval model's output for one full batch ``x`` (labels are not needed)."""
        x = np.ascontiguousarray(_numpy(x), dtype=np.float32)
        if self._session is None or x.shape[0] != self.batch:
            raise OnnxcompError(f"predict needs a trained Trainer and a batch of {self.batch}")
        meta = json.loads((self.graph_dir / "onnxcomp.json").read_text())
        shape = meta["inputs"][meta.get("labels", "labels")]
        y = np.zeros(shape, dtype=np.int64 if self.loss == "cross_entropy" else np.float32)
        return self._eval_step(x, y)[1]

    def _eval_step(self, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        with self._session.eval_mode() as run:
            loss, out = run(x, y)
        return loss_value(loss), np.asarray(out)

    # ----------------------------------------------------------------------------------- state
    def parameters(self) -> dict[str, np.ndarray]:
        """Every checkpoint parameter (trainable and frozen, e.g. BatchNorm running statistics) by name."""
        if self._session is None:
            raise OnnxcompError("no trained state yet: call fit() first")
        return {name: np.array(p.data, copy=True) for name, p in self._session.state.parameters}

    def sync_module(self) -> list[str]:
        """Copy the trained parameters into the module's state_dict; returns the names copied."""
        import torch

        params = self.parameters()
        current = self.module.state_dict()
        updates = {}
        for name, value in params.items():
            if name not in current:
                continue
            if tuple(current[name].shape) != value.shape:
                raise OnnxcompError(f"parameter {name}: checkpoint shape {value.shape} differs from the module's "
                                    f"{tuple(current[name].shape)}")
            updates[name] = torch.from_numpy(value).to(current[name].dtype)
        self.module.load_state_dict(updates, strict=False)
        return sorted(updates)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write graphs, checkpoint (with optimizer state) and progress to ``directory`` for ``load``/resume."""
        from onnxcomp.runtime import bounds
        from onnxcomp.runtime.resume import save_training_state

        if self._session is None or self.graph_dir is None:
            raise OnnxcompError("nothing to save yet: call fit() first")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name in _GRAPH_FILES:
            src = self.graph_dir / name
            if src.exists() and src.resolve() != (directory / name).resolve():
                shutil.copy2(src, directory / name)
        info = {"epoch": self.epoch, "step": self.step, "batch": self.batch, "policy": self.policy,
                "loss": self.loss, "bounds": bounds.bounds()}
        save_training_state(directory, self._session.state, _SAVE_FILE, json.dumps(info, indent=2))
        return directory

    def load(self, directory: str | os.PathLike[str]) -> None:
        """Resume from a ``save``: its graphs, parameters, optimizer state, progress and error bounds."""
        directory = Path(directory)
        info_path = directory / _SAVE_FILE
        if not info_path.exists():
            raise OnnxcompError(f"{directory}: no {_SAVE_FILE}; not a directory written by Trainer.save")
        info = json.loads(info_path.read_text())
        if info.get("loss", self.loss) != self.loss:
            raise OnnxcompError(f"{directory} was trained with loss {info['loss']!r}, this Trainer uses {self.loss!r}")
        self.graph_dir = directory
        self.batch, self.epoch, self.step, self.policy = info["batch"], info["epoch"], info["step"], info["policy"]
        self._open(directory / "checkpoint", info.get("bounds"))
        self.sync_module()


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)
