"""Bring your own model: from_torch, `artifacts --module`, transform --batch, onnxcomp.torch.Trainer."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from onnxcomp import from_torch
from onnxcomp.errors import OnnxcompError
from onnxcomp.planner.auto import BudgetError
from onnxcomp.static_batch import fix_batch, prepare_for_transform
from onnxcomp.torch import Trainer
from onnxcomp.transform import transform


# Three user-style models (not from models/): a residual CNN, an MLP on flat features, a depthwise-separable
# CNN. Small, so a test trains them in seconds.
class ResidualCNN(nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 8 * 8, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        return self.head(torch.relu(h + self.block(h)))


class TabularMLP(nn.Module):
    def __init__(self, features: int = 20, classes: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh(),
                                 nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SeparableCNN(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def _loader(shape: tuple[int, ...], classes: int, n: int = 48, batch: int = 8, seed: int = 0):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *shape, generator=g)
    y = (x.reshape(n, -1)[:, : classes].argmax(dim=1)).long()  # learnable: the largest of the first features
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=False)


def _round_trip(trainer: Trainer, module: nn.Module, x: torch.Tensor) -> float:
    """Max |module(x) - ORT eval model(x)| after training: the module got the trained state."""
    ort_out = trainer.predict(x)
    module.eval()
    with torch.no_grad():
        torch_out = module(x).numpy()
    module.train()
    return float(np.abs(ort_out - torch_out).max())


def test_trainer_fit_round_trip_and_resume(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TabularMLP()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = _loader((20,), 4, n=52)  # 6 full batches and one partial (skipped: the graph has batch 8)
    trainer = Trainer(model, nn.CrossEntropyLoss(), policy="lossless", lr=1e-2, progress=False, smoke_test=False,
                      work_dir=tmp_path / "work")
    result = trainer.fit(data, epochs=2, checkpoint_dir=tmp_path / "ckpt")
    assert result.steps == 12 and result.skipped_batches == 2 and result.policy == "lossless"
    assert all(np.isfinite(result.losses)) and np.mean(result.losses[-3:]) < np.mean(result.losses[:3])
    changed = [k for k in before if not torch.equal(before[k], model.state_dict()[k])]
    assert sorted(changed) == sorted(k for k, _ in model.named_parameters())
    x = next(iter(data))[0]
    assert _round_trip(trainer, model, x) < 1e-4
    metrics = trainer.evaluate(data)
    assert 0 <= metrics["accuracy"] <= 1 and metrics["samples"] == 48

    # Resume: a new Trainer finds the save, continues at epoch 3 and ends where an uninterrupted run would.
    saved = json.loads((tmp_path / "ckpt" / "trainer.json").read_text())
    assert saved["epoch"] == 2 and saved["step"] == 12
    resumed_model = TabularMLP()
    resumed = Trainer(resumed_model, "cross_entropy", policy="lossless", lr=1e-2, progress=False, smoke_test=False,
                      work_dir=tmp_path / "work2")
    r2 = resumed.fit(data, epochs=3, checkpoint_dir=tmp_path / "ckpt")
    assert r2.steps == 18 and len(r2.losses) == 6
    straight = trainer.fit(data, epochs=3)
    assert np.allclose(straight.losses, r2.losses, rtol=0, atol=1e-6)


def test_from_torch_errors() -> None:
    with pytest.raises(OnnxcompError, match="no ORT training equivalent"):
        from_torch(TabularMLP(), torch.randn(4, 20), loss=nn.NLLLoss())
    with pytest.raises(OnnxcompError, match="does not run on an input"):
        from_torch(TabularMLP(), torch.randn(4, 7))
    with pytest.raises(OnnxcompError, match="outputs 4 classes but 3"):
        from_torch(TabularMLP(), torch.randn(4, 20), classes=3)


@pytest.fixture(scope="module")
def dynamic_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A residual CNN exported the way ORT's docs show it: dynamic batch axis."""
    from onnxruntime.training import artifacts

    out = tmp_path_factory.mktemp("dynamic")
    net = ResidualCNN().train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(4, 3, 16, 16),), str(out / "fwd.onnx"), dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    fwd = onnx.load(str(out / "fwd.onnx"))
    params = [n for n, _ in net.named_parameters()]
    frozen = [i.name for i in fwd.graph.initializer if i.name not in params]
    artifacts.generate_artifacts(fwd, requires_grad=params, frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(out))
    return out


def test_dynamic_batch_needs_batch_and_then_trains(dynamic_artifacts: Path, tmp_path: Path) -> None:
    from onnxcomp.runtime.train import train

    with pytest.raises(OnnxcompError, match="pass --batch N"):
        transform(dynamic_artifacts, tmp_path / "x.onnx", "lossless")
    loose = transform(dynamic_artifacts, tmp_path / "loose.onnx", "lossless", allow_unresolved=True)
    fixed = transform(dynamic_artifacts, tmp_path / "fixed.onnx", "lossless", batch=4)
    assert loose.before["stashed_bytes"] < 1024 < fixed.before["stashed_bytes"]  # unresolved sizes count 0 bytes
    assert fixed.after["lower_bound_bytes"] < fixed.before["lower_bound_bytes"]
    static = onnx.load(str(tmp_path / "fixed.onnx"))
    assert next(i for i in static.graph.input if i.name == "input").type.tensor_type.shape.dim[0].dim_value == 4
    # The batch-fixed graph trains (ORT crashed natively when the declared shapes were dropped instead).
    r = train(dynamic_artifacts, model=tmp_path / "fixed.onnx", steps=2, progress=False)
    assert len(r.losses) == 2 and all(np.isfinite(r.losses))
    with pytest.raises(OnnxcompError, match="optimizer model"):
        transform(dynamic_artifacts / "optimizer_model.onnx", tmp_path / "y.onnx", "lossless")
    with pytest.raises(OnnxcompError, match="static batch of 4, not 8"):
        fix_batch(static, 8)
    assert prepare_for_transform(static, "m") is static


@pytest.mark.slow
@pytest.mark.parametrize("factory,shape,classes", [(ResidualCNN, (3, 16, 16), 3), (TabularMLP, (20,), 4),
                                                   (SeparableCNN, (1, 12, 12), 5)])
@pytest.mark.parametrize("policy", ["lossless", "comet"])
def test_user_models_through_the_pipeline(factory, shape, classes, policy, tmp_path: Path) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = factory(classes=classes) if factory is not TabularMLP else factory(classes=classes)
    data = _loader(shape, classes)
    art = from_torch(model, torch.randn(8, *shape), out_dir=tmp_path / "art")
    assert art.smoke_loss is not None and np.isfinite(art.smoke_loss)
    result = transform(art.out_dir, tmp_path / "graph", policy, min_bytes=0)
    assert result.records, f"{policy} encoded nothing in {factory.__name__}"
    trainer = Trainer(model, nn.CrossEntropyLoss(), policy=policy, lr=5e-3, progress=False, smoke_test=False,
                      policy_options={"min_bytes": 0}, work_dir=tmp_path / "work")
    fit = trainer.fit(data, epochs=3)
    assert fit.steps == 18 and np.mean(fit.losses[-6:]) < np.mean(fit.losses[:6])
    assert _round_trip(trainer, model, next(iter(data))[0]) < 1e-4


@pytest.mark.slow
def test_artifacts_cli_with_module(tmp_path: Path) -> None:
    (tmp_path / "usernet.py").write_text(
        "from torch import nn\n"
        "def build(num_classes=10):\n"
        "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),"
        " nn.Linear(4 * 46 * 46, num_classes))\n")
    cmd = [sys.executable, "-m", "onnxcomp", "artifacts", "--module", "usernet:build", "--input-shape", "3,48,48",
           "--classes", "7", "--batch", "4", "-o", str(tmp_path / "out")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads((tmp_path / "out" / "onnxcomp.json").read_text())
    assert meta["classes"] == 7 and meta["inputs"] == {"input": [4, 3, 48, 48], "labels": [4]}
    bad = subprocess.run(cmd[:-2] + ["-o", str(tmp_path / "o2")][:0] + ["--input-shape", "3,4", "-o",
                         str(tmp_path / "o2")], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_trainer_auto_policy_respects_the_budget(tmp_path: Path) -> None:
    data = _loader((20,), 4, n=16)
    tight = Trainer(TabularMLP(), "cross_entropy", policy="auto", budget=1, progress=False, smoke_test=False,
                    work_dir=tmp_path / "tight")
    with pytest.raises(BudgetError, match="budget"):
        tight.fit(data, epochs=1)
    roomy = Trainer(TabularMLP(), "cross_entropy", policy="auto", budget=1 << 30, progress=False, smoke_test=False,
                    work_dir=tmp_path / "roomy")
    assert roomy.fit(data, epochs=1).policy == "auto"
    assert roomy.transform_summary["after"]["lower_bound_bytes"] <= 1 << 30
    assert "auto" in roomy.transform_summary   # the planner's decisions reach the summary
