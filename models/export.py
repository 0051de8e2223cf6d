"""Export a PyTorch model to an ONNX forward graph suitable for ORT training-artifact generation."""

from __future__ import annotations

import io
import os
import tempfile
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import torch
from torch import nn

from onnxcomp.errors import OnnxcompError

from .transformer_export import repair_for_training

INPUT_NAME = "input"
OUTPUT_NAME = "logits"


def _validate_shape(batch: int, image: int, num_classes: int) -> None:
    for label, value in (("batch size", batch), ("image size", image), ("number of classes", num_classes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise OnnxcompError(f"{label} must be a positive integer, got {value!r}")


def export_training_onnx(
    model: nn.Module,
    batch: int,
    image: int,
    num_classes: int,
    path: str | os.PathLike[str],
    opset: int = 17,
    *,
    dynamic_batch: bool = False,
) -> Path:
    """Export ``model`` for training: input "input" [batch, 3, image, image], output "logits".

    Uses the TorchScript exporter in TRAINING mode without constant folding, so BatchNorm stays a
    training-mode BatchNormalization (the dynamo exporter would fold it into Conv). Shapes are static
    unless ``dynamic_batch``: ORT-training 1.19.2 has crashed on some dynamic-batch graphs.
    Returns the written path.
    """
    _validate_shape(batch, image, num_classes)
    check = getattr(model, "check_image_size", None)
    if check is not None:
        check(image, image)
    out_features = _classifier_width(model)
    if out_features is not None and out_features != num_classes:
        raise OnnxcompError(
            f"model has {out_features} output classes but {num_classes} were requested for export; "
            "build the model with the same number of classes"
        )

    # Token models (GPT-tiny) say what they read; images otherwise.
    example = getattr(model, "example_input", None)
    dummy = example(batch) if example is not None else torch.randn(batch, 3, image, image)
    dynamic_axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    return export_module(model, (dummy,), path, opset, dynamic_axes=dynamic_axes)


def export_module(
    model: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: str | os.PathLike[str],
    opset: int = 17,
    *,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    dynamic_axes: dict[str, dict[int, str]] | None = None,
) -> Path:
    """Export any module for training with static shapes taken from ``example_inputs``.

    What works with the pinned torch: the TorchScript exporter (``dynamo=False``; the dynamo exporter needs
    onnxscript and puts BatchNorm in inference mode), TRAINING mode, no constant folding. Inputs are named
    "input" (one input) or "input0", "input1", ...; outputs "logits" (one) or "output0", ... Written
    atomically; returns the path.
    """
    if not 7 <= opset <= 20:
        raise OnnxcompError(f"ONNX opset {opset} is not supported for export; use an opset between 7 and 20")
    if input_names is None:
        input_names = [INPUT_NAME] if len(example_inputs) == 1 else [f"input{i}" for i in range(len(example_inputs))]
    if output_names is None:
        output_names = [OUTPUT_NAME]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    param = next(model.parameters(), None)
    if param is not None and param.device.type == "meta":
        raise OnnxcompError("cannot export a model built on the meta device; build it on the CPU")
    shapes = ", ".join("x".join(map(str, t.shape)) for t in example_inputs)

    # Write next to the target then rename, so a failed export never leaves a truncated file behind.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    was_training = model.training
    chatter = io.StringIO()
    try:
        with warnings.catch_warnings(), redirect_stdout(chatter), redirect_stderr(chatter):
            # Tracer warnings about int(x.shape[...]) are expected: shapes are fixed at export time.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                tuple(example_inputs),
                tmp_name,
                dynamo=False,
                export_params=True,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False,
                opset_version=opset,
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic_axes,
            )
        repair_for_training(tmp_name)  # transformer traps of ORT's gradient builder (LayerNorm, Dropout mask)
        os.replace(tmp_name, path)
    except OnnxcompError:
        raise
    except Exception as exc:
        raise OnnxcompError(
            f"ONNX export of {type(model).__name__} (input {shapes}, opset {opset}) to {path} failed: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        model.train(was_training)
    return path


def _classifier_width(model: nn.Module) -> int | None:
    """Output width of the last Linear layer, if the model ends in one."""
    last = None
    for module in model.modules():
        if isinstance(module, nn.Linear):
            last = module
    return None if last is None else int(last.out_features)
