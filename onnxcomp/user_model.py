"""Bring your own PyTorch model: export it, generate ORT training artifacts, repair the eval model, smoke-test.

`from_torch` is the Python entry point; `onnxcomp artifacts --module pkg.mod:factory` the command-line one.
Both go through onnxcomp.models.artifacts.generate_module_artifacts (static-shape TorchScript export in
training mode, ORT's generate_artifacts into a staging directory, eval-model repair, a first training step in
a child process, atomic publish).
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import OnnxcompError

if TYPE_CHECKING:
    import torch

    from .models.artifacts import ArtifactSet

# torch loss modules onnxblock has an equivalent for
_TORCH_LOSSES = {"CrossEntropyLoss": "cross_entropy", "MSELoss": "mse", "L1Loss": "l1",
                 "BCEWithLogitsLoss": "bce_with_logits"}


def loss_name(loss: Any) -> str:
    """'cross_entropy', 'mse', 'l1' or 'bce_with_logits' from a name or a torch.nn loss module (default
    reduction only: onnxblock's losses take the mean)."""
    from .models.artifacts import LOSSES

    if isinstance(loss, str):
        key = loss.lower().replace("-", "_")
        if key not in LOSSES:
            raise OnnxcompError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSSES)}")
        return key
    kind = type(loss).__name__
    if kind not in _TORCH_LOSSES:
        raise OnnxcompError(f"loss {kind} has no ORT training equivalent; use one of "
                            f"{', '.join(_TORCH_LOSSES)} (or their names: {', '.join(LOSSES)})")
    reduction = getattr(loss, "reduction", "mean")
    if reduction != "mean":
        raise OnnxcompError(f"{kind}(reduction={reduction!r}): ORT's training losses take the mean; "
                            "use reduction='mean'")
    if kind == "CrossEntropyLoss" and (getattr(loss, "label_smoothing", 0.0) or getattr(loss, "weight", None)
                                       is not None):
        raise OnnxcompError("CrossEntropyLoss with label_smoothing or class weights has no ORT training "
                            "equivalent; use a plain CrossEntropyLoss()")
    return _TORCH_LOSSES[kind]


def from_torch(
    module: torch.nn.Module,
    example_input: torch.Tensor,
    *,
    loss: Any = "cross_entropy",
    optimizer: str = "adamw",
    out_dir: str | os.PathLike[str] | None = None,
    classes: int | None = None,
    overwrite: bool = False,
    smoke_test: bool = True,
    opset: int = 17,
) -> ArtifactSet:
    """ORT training artifacts for ``module``, with static shapes taken from ``example_input``.

    loss: "cross_entropy" (output [batch, classes] logits, labels int64 [batch]), "mse", "l1",
    "bce_with_logits", or the matching torch.nn loss module. optimizer: "adamw" or "sgd" (ORT's optimizer
    model; the learning rate can be set at run time). out_dir: where the artifact directory goes (default:
    a new temporary directory, printed in the returned ArtifactSet's out_dir). The module's current weights
    are exported; it is not modified. Returns the ArtifactSet (training_model.onnx, eval_model.onnx, which
    returns (loss, output), optimizer_model.onnx, checkpoint, onnxcomp.json).
    """
    import torch

    from .models.artifacts import generate_module_artifacts

    if not isinstance(module, torch.nn.Module):
        raise OnnxcompError(f"from_torch needs a torch.nn.Module, got {type(module).__name__}")
    if out_dir is None:
        out_dir = Path(tempfile.mkdtemp(prefix=f"onnxcomp-{type(module).__name__.lower()}-")) / "artifacts"
    return generate_module_artifacts(
        module, example_input, out_dir, loss=loss_name(loss), optimizer=optimizer, classes=classes,
        overwrite=overwrite, smoke_test=smoke_test, opset=opset, name=type(module).__name__,
    )


def load_factory(spec: str) -> Callable[..., Any]:
    """``pkg.mod:factory`` → the callable (the current directory is importable, as with ``python -m``)."""
    if spec.count(":") != 1 or not all(spec.split(":")):
        raise OnnxcompError(f"--module {spec!r}: use the form package.module:factory, e.g. mynet:build_model")
    mod_name, attr = spec.split(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise OnnxcompError(f"--module {spec!r}: cannot import {mod_name!r} ({exc}); run from the directory that "
                            "holds it or install it") from None
    factory = mod
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise OnnxcompError(f"--module {spec!r}: {mod_name} has no attribute {attr!r}")
    if not callable(factory):
        raise OnnxcompError(f"--module {spec!r}: {attr} is not callable")
    return factory


def build_from_factory(spec: str, classes: int | None) -> torch.nn.Module:
    """Call the factory, passing ``num_classes`` when it takes one (as torchvision's builders do)."""
    import torch

    factory = load_factory(spec)
    kwargs: dict[str, Any] = {}
    try:
        if classes is not None and "num_classes" in inspect.signature(factory).parameters:
            kwargs["num_classes"] = classes
    except (TypeError, ValueError):
        pass
    try:
        module = factory(**kwargs)
    except Exception as exc:
        raise OnnxcompError(f"--module {spec!r}: calling it failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise OnnxcompError(f"--module {spec!r} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def parse_shape(text: str) -> tuple[int, ...]:
    """'3,48,48' → (3, 48, 48): the input shape without the batch dimension."""
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise OnnxcompError(f"--input-shape {text!r}: give the per-sample shape as positive integers, e.g. 3,48,48")
    return dims


def cli_artifacts(args: Any) -> int:
    """`onnxcomp artifacts --module pkg.mod:factory --input-shape C,H,W ...`"""
    import torch

    from .models.artifacts import generate_module_artifacts

    if args.model:
        raise OnnxcompError("give either --model (a zoo model) or --module (your own), not both")
    if not args.input_shape:
        raise OnnxcompError("--module needs --input-shape, the per-sample input shape, e.g. --input-shape 3,48,48")
    shape = parse_shape(args.input_shape)
    module = build_from_factory(args.module, args.classes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        example = torch.randn(args.batch, *shape)
    out = generate_module_artifacts(
        module, example, Path(args.output), name=args.module, loss=args.loss, classes=args.classes,
        optimizer=args.optimizer, smoke_test=not args.no_smoke_test, overwrite=args.force,
    )
    print(f"wrote ORT training artifacts for {args.module} (batch {args.batch}, input {'x'.join(map(str, shape))}, "
          f"loss {args.loss}) to {out.out_dir}")
    return 0
