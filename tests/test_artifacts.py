"""Training artifacts: generation, eval-model BatchNorm fix, child-process smoke test, safe publishing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.errors import OnnxcompError
from onnxcomp.models import artifacts as artifacts_mod
from onnxcomp.models.artifacts import ArtifactSet, fix_eval_batchnorm, generate_artifacts, smoke_test_artifacts


@pytest.fixture(scope="module")
def resnet18_artifacts(tmp_path_factory) -> ArtifactSet:
    out = tmp_path_factory.mktemp("r18") / "artifacts"
    return generate_artifacts("resnet18", 2, 32, 10, out, seed=0)


def test_resnet18_artifacts_are_complete(resnet18_artifacts: ArtifactSet) -> None:
    a = resnet18_artifacts
    for path in (a.training_model, a.eval_model, a.optimizer_model, a.checkpoint, a.metadata):
        assert path.is_file() and path.parent == a.out_dir
    assert sorted(p.name for p in a.out_dir.iterdir()) == sorted(
        ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint", "onnxcomp.json"]
    )
    assert a.smoke_loss is not None and np.isfinite(a.smoke_loss)
    meta = json.loads(a.metadata.read_text())
    assert meta["model"] == "resnet18" and meta["batch"] == 2 and meta["image"] == 32 and meta["classes"] == 10
    assert meta["inputs"] == {"input": [2, 3, 32, 32], "labels": [2]}
    assert meta["labels"] == "labels"
    assert isinstance(meta["onnxcomp_version"], str)
    # nothing left behind beside the published directory
    assert [p.name for p in a.out_dir.parent.iterdir()] == ["artifacts"]


def test_training_graph_keeps_training_batchnorm(resnet18_artifacts: ArtifactSet) -> None:
    graph = onnx.load(str(resnet18_artifacts.training_model)).graph
    types = {n.op_type for n in graph.node}
    assert "BatchNormInternal" in types and "BatchNormalizationGrad" in types
    assert "SoftmaxCrossEntropyLoss" in types
    labels = next(i for i in graph.input if i.name == "labels")
    assert labels.type.tensor_type.elem_type == onnx.TensorProto.INT64


def test_eval_model_of_bn_net_loads_and_runs(resnet18_artifacts: ArtifactSet) -> None:
    from onnxruntime.training.api import CheckpointState, Module

    a = resnet18_artifacts
    bns = [n for n in onnx.load(str(a.eval_model)).graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 20 and all(len(n.output) == 1 for n in bns)
    assert fix_eval_batchnorm(a.eval_model) == 0  # idempotent

    state = CheckpointState.load_checkpoint(str(a.checkpoint))
    module = Module(str(a.training_model), state, str(a.eval_model), device="cpu")
    module.eval()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 32, 32), dtype=np.float32)
    loss = module(x, rng.integers(0, 10, size=(2,), dtype=np.int64))
    assert np.isfinite(np.asarray(loss)).all()


def test_mobilenet_v2_tiny_with_sgd(tmp_path: Path) -> None:
    a = generate_artifacts("mobilenet_v2", 2, 32, 10, tmp_path / "mb", optimizer="sgd", seed=3)
    assert a.smoke_loss is not None and np.isfinite(a.smoke_loss)
    assert json.loads(a.metadata.read_text())["optimizer"] == "sgd"


def test_existing_out_dir_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(OnnxcompError, match="overwrite"):
        generate_artifacts("resnet18", 2, 32, 10, out, smoke_test=False)
    assert [p.name for p in out.iterdir()] == ["precious.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]

    a = generate_artifacts("resnet18", 2, 32, 10, out, smoke_test=False, overwrite=True)
    assert a.smoke_loss is None
    assert not (out / "precious.txt").exists() and a.training_model.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_empty_existing_out_dir_is_used(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    a = generate_artifacts("resnet18", 2, 32, 10, out, smoke_test=False)
    assert a.checkpoint.is_file()


def test_user_errors(tmp_path: Path) -> None:
    with pytest.raises(OnnxcompError, match="mobilenet_v2"):
        generate_artifacts("resnet101", 2, 32, 10, tmp_path / "a")
    with pytest.raises(OnnxcompError, match="optimizer"):
        generate_artifacts("resnet18", 2, 32, 10, tmp_path / "a", optimizer="lamb")
    with pytest.raises(OnnxcompError, match="63"):
        generate_artifacts("alexnet", 2, 32, 10, tmp_path / "a")
    with pytest.raises(OnnxcompError, match="batch"):
        generate_artifacts("resnet18", 0, 32, 10, tmp_path / "a")
    assert not list(tmp_path.iterdir())


def test_native_crash_in_smoke_test_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    monkeypatch.setattr(artifacts_mod, "_smoke_command", lambda *args: crash)
    with pytest.raises(OnnxcompError, match="SIGSEGV"):
        smoke_test_artifacts(tmp_path, 2, 32, 10)
    # a failed smoke test publishes nothing and leaves no staging directory
    with pytest.raises(OnnxcompError, match="SIGSEGV"):
        generate_artifacts("resnet18", 2, 32, 10, tmp_path / "out")
    assert not list(tmp_path.iterdir())


def test_child_error_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = [sys.executable, "-c", "raise SystemExit('boom from child')"]
    monkeypatch.setattr(artifacts_mod, "_smoke_command", lambda *args: failing)
    with pytest.raises(OnnxcompError, match="boom from child"):
        smoke_test_artifacts(tmp_path, 2, 32, 10)
