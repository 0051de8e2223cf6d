"""Shared fixtures: small, self-contained ORT training artifacts built from a tiny PyTorch CNN."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

# Test-only PyOp. Defined at conftest import, i.e. before any test creates a session: PyOps defined
# after the extensions library was registered crash ORT (onnxcomp.runtime.pyops refuses them).
TEST_OP = "OnnxcompTestScale"

try:  # the GPU machine has neither onnxruntime-training nor the extensions: its codec/GPU tests need neither
    from onnxruntime_extensions import PyCustomOpDef, onnx_op
except ImportError:
    onnx_op = None

if onnx_op is not None:
    @onnx_op(op_type=TEST_OP, domain="ai.onnx.contrib", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_int64], attrs={"scale": PyCustomOpDef.dt_float})
    def _onnxcomp_test_scale(x: np.ndarray, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        # Returns a transposed (non-contiguous) view when possible, to exercise the hook's contiguity handling.
        y = (x * np.float32(scale)).astype(np.float32)
        if y.ndim >= 2:
            y = np.ascontiguousarray(np.swapaxes(y, 0, 1)).swapaxes(0, 1)
        return y, np.array(x.shape, dtype=np.int64)


@pytest.fixture(scope="session", autouse=True)
def _temp_files_under_pytest(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN202
    """Library defaults that make a temporary directory (``from_torch`` / ``Trainer`` without ``out_dir``) would
    otherwise leave one in /tmp per test run: point tempfile, and the children tests start, at pytest's
    basetemp, which pytest prunes."""
    import os
    import tempfile

    scratch = str(tmp_path_factory.mktemp("tempfile"))
    old_dir, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = scratch
    os.environ["TMPDIR"] = scratch
    yield
    tempfile.tempdir = old_dir
    if old_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = old_env


@pytest.fixture(scope="module", params=["numpy", "numba", "aot"])
def codec_backend(request: pytest.FixtureRequest):  # noqa: ANN201
    """Run a codec test module once per CPU backend: the NumPy reference, the compiled numba kernels and their
    ahead-of-time compiled copies (the default for dpr / sz / zfp / sparse / maxpool; module scope, so hypothesis
    tests can use it; the compiled ones skipped where numba is not installed)."""
    from onnxcomp.custom_ops import cpu

    if request.param in ("numba", "aot") and not cpu.numba_available():
        pytest.skip("numba is not installed")
    with cpu.use_backend(request.param):
        yield request.param


def cupy_or_skip():  # noqa: ANN201
    """CuPy with a usable CUDA device, else skip the calling GPU test (CI has no GPU)."""
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # noqa: BLE001  (CUDA driver/runtime missing raises CUDARuntimeError)
        pytest.skip(f"no usable CUDA device: {exc}")
    return cp


def tensor_ancestors(graph, name: str) -> set[str]:  # noqa: ANN001
    """Every tensor of an ONNX ``graph`` that ``name`` is computed from (``name`` included; graph inputs and
    initializers have no producer and end the walk): the data dependencies an ordering test checks."""
    producer = {o: n for n in graph.node for o in n.output}
    seen, todo = set(), [name]
    while todo:
        t = todo.pop()
        if t in seen or t not in producer:
            continue
        seen.add(t)
        todo += list(producer[t].input)
    return seen


def insert_test_op_after(model_path: Path, out_path: Path, op_type: str = "Relu", scale: float = 1.0) -> Path:
    """Copy a graph with OnnxcompTestScale inserted after the first `op_type` node's output, rewiring
    that output's forward consumers to the op's output."""
    import onnx
    from onnx import helper

    model = onnx.load(str(model_path))
    nodes = list(model.graph.node)
    idx = next(i for i, n in enumerate(nodes) if n.op_type == op_type)
    src = nodes[idx].output[0]
    new_out = src + "_onnxcomp_test"
    for n in nodes[idx + 1:]:
        n.input[:] = [new_out if i == src else i for i in n.input]
    op = helper.make_node(TEST_OP, [src], [new_out, new_out + "_shape"], domain="ai.onnx.contrib",
                          scale=float(scale))
    nodes.insert(idx + 1, op)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    if not any(o.domain == "ai.onnx.contrib" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("ai.onnx.contrib", 1))
    onnx.save(model, str(out_path))
    return out_path


def artifacts_from_net(net, out_dir: Path, *, batch: int, in_channels: int, height: int, width: int,  # noqa: ANN001
                       meta: dict | None = None) -> Path:
    """Export a torch module (training mode, static shapes, legacy exporter: it keeps BN in training mode),
    generate ORT training artifacts (AdamW, cross-entropy) in out_dir, and write ``meta`` as onnxcomp.json."""
    import onnx
    import torch
    from onnxruntime.training import artifacts

    out_dir.mkdir(parents=True, exist_ok=True)
    fwd_path = out_dir / "forward.onnx"
    with warnings.catch_warnings():  # the legacy exporter is deprecated but is the one we need
        warnings.simplefilter("ignore")
        torch.onnx.export(net.train(), (torch.randn(batch, in_channels, height, width),), str(fwd_path),
                          dynamo=False, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=17, input_names=["input"], output_names=["logits"])
    fwd = onnx.load(str(fwd_path))
    params = [i.name for i in fwd.graph.initializer if "running" not in i.name and "num_batches" not in i.name]
    frozen = [i.name for i in fwd.graph.initializer if i.name not in params]
    artifacts.generate_artifacts(fwd, requires_grad=params, frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(out_dir))
    if meta is not None:
        (out_dir / "onnxcomp.json").write_text(json.dumps(meta))
    return out_dir


def build_small_artifacts(
    out_dir: Path,
    *,
    batch: int = 4,
    image: int = 16,
    channels: tuple[int, int] = (8, 16),
    classes: int = 10,
    in_channels: int = 3,
    seed: int = 0,
) -> Path:
    """Export a 2-block Conv-BN-ReLU-MaxPool + Linear CNN and generate ORT training artifacts in out_dir."""
    import torch

    torch.manual_seed(seed)
    c1, c2 = channels

    class SmallCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = torch.nn.Sequential(
                torch.nn.Conv2d(in_channels, c1, 3, padding=1),
                torch.nn.BatchNorm2d(c1),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(c1, c2, 3, padding=1),
                torch.nn.BatchNorm2d(c2),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
            )
            self.fc = torch.nn.Linear(c2 * (image // 4) ** 2, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.flatten(self.features(x), 1))

    meta = {"model": "small_cnn", "batch": batch, "image": [in_channels, image, image],
            "classes": classes, "inputs": ["input"], "labels": "labels"}
    return artifacts_from_net(SmallCNN(), out_dir, batch=batch, in_channels=in_channels, height=image,
                              width=image, meta=meta)


@pytest.fixture(scope="session")
def small_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Training artifacts of a tiny CNN (batch 4, 3x16x16, 10 classes)."""
    return build_small_artifacts(tmp_path_factory.mktemp("small_artifacts"))
