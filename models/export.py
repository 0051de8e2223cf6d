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
    if not 7 <= opset <= 20:
        raise OnnxcompError(f"ONNX opset {opset} is not supported for export; use an opset between 7 and 20")
    check = getattr(model, "check_image_size", None)
    if check is not None:
        check(image, image)
    out_features = _classifier_width(model)
    if out_features is not None and out_features != num_classes:
        raise OnnxcompError(
            f"model has {out_features} output classes but {num_classes} were requested for export; "
            "build the model with the same number of classes"
        )

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    param = next(model.parameters(), None)
    if param is not None and param.device.type == "meta":
        raise OnnxcompError("cannot export a model built on the meta device; build it on the CPU")
    # Token models (GPT-tiny) say what they read; images otherwise.
    example = getattr(model, "example_input", None)
    dummy = example(batch) if example is not None else torch.randn(batch, 3, image, image)
    dynamic_axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None

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
                (dummy,),
                tmp_name,
                dynamo=False,
                export_params=True,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False,
                opset_version=opset,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_axes=dynamic_axes,
            )
        repair_for_training(tmp_name)  # transformer traps of ORT's gradient builder (LayerNorm, Dropout mask)
        os.replace(tmp_name, path)
    except OnnxcompError:
        raise
    except Exception as exc:
        raise OnnxcompError(
            f"ONNX export of {type(model).__name__} (batch {batch}, {image}x{image}, opset {opset}) to {path} "
            f"failed: {exc}"
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
