"""Model registry: build a zoo model by name, count its parameters, list what is available."""

from __future__ import annotations

import torch
from torch import nn

from onnxcomp.errors import OnnxcompError

from .architectures import BUILDERS as CNN_BUILDERS
from .suite import SUITE_BUILDERS, SUITE_NAMES
from .transformers import gpt_tiny, vit_tiny

# Transformers take their input size when built (learned positions, causal mask): see build_model's options.
BUILDERS = {**CNN_BUILDERS, "vit_tiny": vit_tiny, "gpt_tiny": gpt_tiny}
MODEL_NAMES: tuple[str, ...] = ("alexnet", "vgg16", "resnet18", "resnet50", "mobilenet_v2")
# The zoo plus our own architecture suite (models/suite.py) and the transformers: every name the CLI resolves.
_ALL_BUILDERS = {**BUILDERS, **SUITE_BUILDERS}
TRANSFORMER_NAMES: tuple[str, ...] = ("vit_tiny", "gpt_tiny")


def canonical_name(name: str) -> str:
    """The registry key for ``name`` ("ResNet-18" -> "resnet18"); OnnxcompError listing names if unknown."""
    # compare without separators so "ResNet-18", "resnet_18" and "mobilenetv2" all resolve
    squashed = {k.replace("_", ""): k for k in _ALL_BUILDERS}
    key = squashed.get(str(name).strip().lower().replace("-", "").replace("_", ""))
    if key is None:
        raise OnnxcompError(
            f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES + TRANSFORMER_NAMES + SUITE_NAMES)}"
        )
    return key


def build_model(name: str, num_classes: int = 1000, **options: int | None) -> nn.Module:
    """A freshly initialised zoo model (in training mode) with ``num_classes`` outputs.

    ``options`` (e.g. ``image=32``, ``seq_len=256``) reach only builders that take them; None is left out.
    """
    key = canonical_name(name)
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise OnnxcompError(f"number of classes must be a positive integer, got {num_classes!r} for model {name!r}")
    import inspect

    accepted = inspect.signature(_ALL_BUILDERS[key]).parameters
    return _ALL_BUILDERS[key](num_classes, **{k: v for k, v in options.items() if k in accepted and v is not None})


def count_parameters(module: nn.Module) -> int:
    """Number of parameter elements (buffers such as BatchNorm running statistics excluded)."""
    return sum(p.numel() for p in module.parameters())


def min_image_size(name: str) -> int:
    """Smallest square image side the named architecture accepts."""
    with torch.device("meta"):
        return int(getattr(build_model(name, 10), "min_image_size", 1))


def list_models() -> list[dict]:
    """``[{"name": ..., "parameters": ..., "min_image": ...}, ...]`` at 1000 classes.

    Models are built on the meta device, so this allocates no weights and takes milliseconds.
    """
    out = []
    for name in MODEL_NAMES + TRANSFORMER_NAMES:
        with torch.device("meta"):
            model = build_model(name, 1000)
        out.append(
            {
                "name": name,
                "parameters": count_parameters(model),
                "min_image": int(getattr(model, "min_image_size", 1)),
            }
        )
    return out
