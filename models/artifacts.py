"""Generate ONNX Runtime training artifacts for a zoo model, fix the eval model, and smoke-test them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import onnx
import torch

import onnxcomp
from onnxcomp.errors import OnnxcompError, OutputExistsError
from onnxcomp.fileio import OutputLock, publish_directory
from onnxcomp.runtime.eval_model import repair_eval_model as _repair_eval_file

from .export import INPUT_NAME, OUTPUT_NAME, _validate_shape, export_module
from .zoo import build_model, canonical_name, count_parameters

LABELS_NAME = "labels"  # what onnxblock's CrossEntropyLoss calls the labels input it adds
METADATA_NAME = "onnxcomp.json"
OPTIMIZERS = ("adamw", "sgd")
DEFAULT_SMOKE_TIMEOUT_S = 900.0

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArtifactSet:
    """Paths of one generated artifact directory."""

    out_dir: Path
    training_model: Path
    eval_model: Path
    optimizer_model: Path
    checkpoint: Path
    metadata: Path
    smoke_loss: float | None = None  # training loss of the smoke-test step, when one ran

    @classmethod
    def in_dir(cls, out_dir: str | os.PathLike[str], smoke_loss: float | None = None) -> ArtifactSet:
        d = Path(out_dir)
        return cls(
            out_dir=d,
            training_model=d / "training_model.onnx",
            eval_model=d / "eval_model.onnx",
            optimizer_model=d / "optimizer_model.onnx",
            checkpoint=d / "checkpoint",
            metadata=d / METADATA_NAME,
            smoke_loss=smoke_loss,
        )


# onnxblock's losses: name → (LossType member, label input it adds, label dtype)
LOSSES = {
    "cross_entropy": ("CrossEntropyLoss", LABELS_NAME, "int64"),
    "mse": ("MSELoss", "target", "float32"),
    "l1": ("L1Loss", "target", "float32"),
    "bce_with_logits": ("BCEWithLogitsLoss", "target", "float32"),
}


def generate_artifacts(
    name: str,
    batch: int,
    image: int,
    num_classes: int,
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    smoke_test: bool = True,
    optimizer: str = "adamw",
    overwrite: bool = False,
    opset: int = 17,
    smoke_timeout_s: float = DEFAULT_SMOKE_TIMEOUT_S,
    seq_len: int | None = None,
) -> ArtifactSet:
    """Build zoo model ``name``, export it and write ORT training artifacts into ``out_dir``.

    Writes training_model.onnx, eval_model.onnx (BatchNorm defect fixed), optimizer_model.onnx, checkpoint
    and onnxcomp.json. Loss: CrossEntropy on "logits" against int64 "labels" [batch]; every model parameter
    is trainable, BatchNorm running statistics are frozen. Everything is built in a temporary directory
    beside ``out_dir`` and renamed into place only after it (and the optional one-step smoke test in a child
    process) succeeded. An existing non-empty ``out_dir`` is replaced only with ``overwrite=True``.
    """
    _validate_shape(batch, image, num_classes)
    name = canonical_name(name)
    with torch.random.fork_rng(devices=[]):  # seed the weights without disturbing the caller's RNG
        torch.manual_seed(seed)
        # image / seq_len reach the transformers only (learned positions); raises OnnxcompError for unknown names
        model = build_model(name, num_classes, image=image, seq_len=seq_len)
    # Token models (GPT-tiny) say what they read; images otherwise.
    make_example = getattr(model, "example_input", None)
    example = make_example(batch) if make_example is not None else torch.randn(batch, 3, image, image)
    check = getattr(model, "check_image_size", None)
    if check is not None:
        check(image, image)
    return generate_module_artifacts(
        model, example, out_dir, name=name, classes=num_classes, optimizer=optimizer, seed=seed,
        smoke_test=smoke_test, overwrite=overwrite, opset=opset, smoke_timeout_s=smoke_timeout_s,
        metadata={"image": image, **({"seq_len": seq_len} if seq_len is not None else {})},
        release_model=True, eval_output=False,
    )


def generate_module_artifacts(
    model: torch.nn.Module,
    example_input: torch.Tensor,
    out_dir: str | os.PathLike[str],
    *,
    name: str | None = None,
    loss: str = "cross_entropy",
    classes: int | None = None,
    optimizer: str = "adamw",
    seed: int = 0,
    smoke_test: bool = True,
    overwrite: bool = False,
    opset: int = 17,
    smoke_timeout_s: float = DEFAULT_SMOKE_TIMEOUT_S,
    metadata: dict | None = None,
    release_model: bool = False,
    eval_output: bool = True,
) -> ArtifactSet:
    """ORT training artifacts for any single-input PyTorch module, exported with ``example_input``'s shape.

    loss: one of LOSSES (cross_entropy: the output is [batch, classes] logits and the labels int64 [batch];
    the others compare against a float target shaped like the output). classes: for cross_entropy, checked
    against the output's last dimension (inferred from it when None). Every parameter is trainable; buffers
    (BatchNorm running statistics) are frozen and still updated by ORT's training graph. Staging, the eval
    model repair, the child-process smoke test and the atomic publish are as for ``generate_artifacts``.
    release_model: drop the reference to ``model`` once exported (large zoo models), so the caller's copy is
    the only one. eval_output: the eval model returns (loss, output) rather than the loss alone.
    """
    optimizer_key = _check_options(optimizer, loss, example_input)
    name = name or type(model).__name__
    out_dir = Path(out_dir).resolve()  # "." or "x/.." must still have a real name and parent to rename
    _check_destination(out_dir, overwrite)
    example_input = example_input.detach().to("cpu")
    classes, output_shape = _loss_output(model, example_input, name, loss, classes)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = OutputLock(out_dir).acquire()  # one writer per directory; removes what killed runs left beside it
    staging = _staging_directory(out_dir)
    try:
        started = time.perf_counter()
        forward_path = export_module(model, (example_input,), staging / "forward.onnx", opset)
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        n_params = count_parameters(model)
        if release_model:
            del model  # VGG-16's weights are half a gigabyte; the ONNX file has them now
        frozen = _frozen_parameters(forward_path, trainable, name)
        _run_ort_generator(forward_path, staging, trainable, frozen, loss=loss, optimizer=optimizer_key,
                           what=f"{name!r} (input {list(example_input.shape)}, loss {loss})")
        forward_path.unlink()

        result = ArtifactSet.in_dir(staging)
        fixed = repair_eval_model(result.eval_model, OUTPUT_NAME if eval_output else None)
        _log.info("eval model: trimmed extra outputs of %d BatchNormalization nodes", fixed)
        meta = _artifact_metadata(result.training_model, name=name, loss=loss, example_input=example_input,
                                  classes=classes, output_shape=output_shape, optimizer=optimizer_key, seed=seed,
                                  opset=opset, parameters=n_params, extra=metadata)
        result.metadata.write_text(json.dumps(meta, indent=2) + "\n")
        _log.info("artifacts for %s generated in %.1f s", name, time.perf_counter() - started)

        smoke_loss = None
        if smoke_test:
            smoke = smoke_test_artifacts(staging, timeout_s=smoke_timeout_s, seed=seed)
            smoke_loss = smoke["loss"]
        _publish(staging, out_dir, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        lock.release()
    return ArtifactSet.in_dir(out_dir, smoke_loss)


def _check_options(optimizer: str, loss: str, example_input: torch.Tensor) -> str:
    """Refuse an unknown optimizer or loss, or an input without a batch dimension; returns the optimizer key."""
    optimizer_key = optimizer.lower()
    if optimizer_key not in OPTIMIZERS:
        raise OnnxcompError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
    if loss not in LOSSES:
        raise OnnxcompError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSSES)}")
    if not isinstance(example_input, torch.Tensor) or example_input.dim() < 1:
        raise OnnxcompError("example_input must be one tensor with a batch dimension, e.g. torch.randn(32, 3, 64, 64)")
    return optimizer_key


def _loss_output(model: torch.nn.Module, example_input: torch.Tensor, name: str, loss: str,
                 classes: int | None) -> tuple[int | None, tuple[int, ...]]:
    """The module's output shape, checked against the loss; for cross-entropy the class count is checked
    against, or read from, the output's last dimension."""
    batch = int(example_input.shape[0])
    output_shape = _output_shape(model, example_input)
    if loss == "cross_entropy":
        # A token model's logits are one row per position ([batch·seq, vocab]) against labels of that length.
        if len(output_shape) != 2 or output_shape[0] % batch:
            raise OnnxcompError(
                f"{name}: loss 'cross_entropy' needs [batch, classes] logits, but the model returns shape "
                f"{list(output_shape)} for input {list(example_input.shape)}; use --loss mse or reshape the output"
            )
        if classes is not None and classes != output_shape[1]:
            raise OnnxcompError(
                f"{name} outputs {output_shape[1]} classes but {classes} were requested; build the model with "
                f"{classes} outputs or pass --classes {output_shape[1]}"
            )
        classes = int(output_shape[1])
    return classes, output_shape


def _staging_directory(out_dir: Path) -> Path:
    """A fresh directory beside ``out_dir`` to build the artifacts in (renamed into place at the end)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it 0700; the published directory should look ordinary
    return staging


def _frozen_parameters(forward_path: Path, trainable: list[str], name: str) -> list[str]:
    """The exported graph's initializers that are not trainable parameters (BatchNorm running statistics);
    every trainable parameter must be an initializer, or its gradient cannot be requested."""
    forward = onnx.load(str(forward_path))
    initializers = {init.name for init in forward.graph.initializer}
    missing = [n for n in trainable if n not in initializers]
    if missing:
        raise OnnxcompError(
            f"exported graph of {name!r} lacks initializers for parameters {missing[:5]}; "
            "the exporter renamed or folded them (shared or unused parameters?), so their gradients "
            "cannot be requested"
        )
    return sorted(initializers.difference(trainable))


def _run_ort_generator(forward_path: Path, staging: Path, trainable: list[str], frozen: list[str], *,
                       loss: str, optimizer: str, what: str) -> None:
    """onnxruntime-training's generate_artifacts on the exported forward graph, into ``staging``."""
    from onnxruntime.training import artifacts as ort_artifacts

    try:
        # ORT writes large models' external data to temp.onnx.data in the *working directory*: run it
        # inside the staging dir so it never lands in the user's cwd and concurrent runs cannot collide.
        with _native_stderr_captured() as native_log, contextlib.chdir(staging):
            ort_artifacts.generate_artifacts(
                str(forward_path),
                requires_grad=trainable,
                frozen_params=frozen,
                loss=getattr(ort_artifacts.LossType, LOSSES[loss][0]),
                optimizer=ort_artifacts.OptimType.AdamW if optimizer == "adamw" else ort_artifacts.OptimType.SGD,
                artifact_directory=str(staging),
            )
    except Exception as exc:
        tail = "\n".join(native_log.getvalue().strip().splitlines()[-10:])
        raise OnnxcompError(
            f"onnxruntime-training could not generate artifacts for {what}: {exc}"
            + (f"\nonnxruntime log:\n{tail}" if tail else "")
        ) from exc


def _artifact_metadata(training_model: Path, *, name: str, loss: str, example_input: torch.Tensor,
                       classes: int | None, output_shape: tuple[int, ...], optimizer: str, seed: int, opset: int,
                       parameters: int, extra: dict | None) -> dict:
    """onnxcomp.json: what the runtime needs to feed the graph (data inputs' shapes, labels, dtypes) and how
    it was made."""
    _, label_name, label_dtype = LOSSES[loss]
    meta = {
        "model": name,
        "batch": int(example_input.shape[0]),
        "image": list(example_input.shape[1:]),
        "classes": classes,
        "inputs": _graph_inputs(training_model, {INPUT_NAME, label_name}),
        "labels": label_name,
        "label_dtype": label_dtype,
        "loss": loss,
        "output": OUTPUT_NAME,
        "output_shape": list(output_shape),
        "optimizer": optimizer,
        "seed": seed,
        "opset": opset,
        **({"input_dtype": "int64"} if example_input.dtype == torch.int64 else {}),  # token ids
        "parameters": parameters,
        "onnxcomp_version": onnxcomp.__version__,
    }
    if loss == "cross_entropy":  # the zoo's metadata never had these keys; keep it as it was
        for key in ("label_dtype", "loss", "output_shape"):
            meta.pop(key)
    meta.update(extra or {})
    return meta


def _output_shape(model: torch.nn.Module, example_input: torch.Tensor) -> tuple[int, ...]:
    """The module's output shape for ``example_input``, from a no-grad forward in eval mode."""
    was_training = model.training
    try:
        with torch.no_grad():
            out = model.eval()(example_input)
    except Exception as exc:
        raise OnnxcompError(
            f"{type(model).__name__} does not run on an input of shape {list(example_input.shape)}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise OnnxcompError(f"{type(model).__name__} returns {type(out).__name__}; onnxcomp needs a module that "
                            "returns one tensor (wrap it to return the logits)")
    return tuple(int(d) for d in out.shape)


class _NativeLog:
    """What native code wrote to stderr inside ``_native_stderr_captured`` (its last 8 KiB)."""

    def __init__(self) -> None:
        self.text = ""

    def getvalue(self) -> str:
        return self.text


@contextlib.contextmanager
def _native_stderr_captured() -> Iterator[_NativeLog]:
    """Point file descriptor 2 at a temp file: ORT's graph builder prints hundreds of INFO lines there that
    Python logging cannot silence. The tail is kept so a failure can still show it."""
    captured = _NativeLog()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - 8192))
            captured.text = log.read().decode(errors="replace")


def repair_eval_model(eval_model: str | os.PathLike[str], output_name: str | None = None) -> int:
    """``fix_eval_batchnorm``, and (given ``output_name``) make the forward output an eval-model output after
    the loss, so ``Module.eval()`` returns (loss, output): predictions without a second export. Returns the
    number of BatchNormalization nodes changed (onnxcomp.runtime.eval_model)."""
    return _repair_eval_file(eval_model, output=output_name)


def fix_eval_batchnorm(eval_model: str | os.PathLike[str]) -> int:
    """Make an onnxblock eval model loadable (inference BatchNormalization keeps only its Y output); rewrites
    the file in place and returns how many nodes changed (onnxcomp.runtime.eval_model)."""
    return repair_eval_model(eval_model)


def smoke_test_artifacts(
    artifact_dir: str | os.PathLike[str],
    batch: int | None = None,
    image: int | None = None,
    num_classes: int | None = None,
    *,
    seed: int = 0,
    timeout_s: float = DEFAULT_SMOKE_TIMEOUT_S,
) -> dict[str, float]:
    """One training step, optimizer step and eval step on random data, in a child process.

    The input and label shapes come from the directory's onnxcomp.json; batch/image/num_classes only
    label the messages (kept for callers of the zoo-only signature).

    Returns ``{"loss": ..., "eval_loss": ...}``. A crash, error or timeout in the child is raised as an
    OnnxcompError naming the signal or the child's last error lines.
    """
    artifact_dir = Path(artifact_dir)
    cmd = _smoke_command(artifact_dir, seed)
    if batch is None:
        where = f"smoke test of the training artifacts in {artifact_dir}"
    else:
        where = f"smoke test of the training artifacts (batch {batch}, {image}x{image}, {num_classes} classes)"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise OnnxcompError(
            f"{where} did not finish within {timeout_s:.0f} s; pass smoke_test=False to skip it or use a "
            "smaller batch/image"
        ) from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        if proc.returncode < 0:
            try:
                sig = signal.Signals(-proc.returncode).name
            except ValueError:
                sig = f"signal {-proc.returncode}"
            reason = f"crashed with {sig} inside onnxruntime-training"
        else:
            reason = f"failed with exit code {proc.returncode}"
        raise OnnxcompError(
            f"{where} {reason}; try a static-shape export or another batch/image size. Child stderr:\n{tail}"
        )
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise OnnxcompError(f"{where} printed no result; child stdout was {proc.stdout[-500:]!r}") from exc


def _smoke_command(artifact_dir: Path, seed: int) -> list[str]:
    return [sys.executable, "-m", "onnxcomp.models._smoke", str(artifact_dir), str(seed)]


def _graph_inputs(model_path: Path, names: set[str]) -> dict[str, list[int | str]]:
    """Shapes of the named graph inputs, in graph order (dim_param strings for symbolic dims).

    The training graph also takes every parameter and gradient buffer as an input; those are fed from the
    checkpoint, so only the data inputs are named here.
    """
    model = onnx.load(str(model_path), load_external_data=False)
    out: dict[str, list[int | str]] = {}
    for vi in model.graph.input:
        if vi.name not in names:
            continue
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    return out


def _check_destination(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise OnnxcompError(f"artifact directory {out_dir} exists and is not a directory; choose another path")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise OutputExistsError(f"artifact directory {out_dir}", "already exists and is not empty",
                                how="pass overwrite=True")


def _publish(staging: Path, out_dir: Path, overwrite: bool) -> None:
    """Swap the finished staging directory in for ``out_dir`` in one atomic rename (no copying): ``out_dir`` is
    always the complete old set or the complete new one, even if the process is killed."""
    _check_destination(out_dir, overwrite)  # again: something may have appeared while we worked
    publish_directory(staging, out_dir, replace=overwrite)


__all__ = [
    "ArtifactSet", "generate_artifacts", "generate_module_artifacts", "repair_eval_model", "LOSSES",
    "fix_eval_batchnorm", "smoke_test_artifacts", "LABELS_NAME",
    "METADATA_NAME", "OPTIMIZERS", "INPUT_NAME",
]
