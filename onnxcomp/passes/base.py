"""What every graph pass shares: the result type, and graph-editing helpers that keep ORT's order right."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..errors import OnnxcompError

# Custom ops live in onnxruntime-extensions' PyOp domain.
CUSTOM_DOMAIN = "ai.onnx.contrib"
from ..metadata import PLAN_METADATA_KEY  # noqa: F401  (re-export)


@dataclass
class Skipped:
    name: str
    pattern: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "pattern": self.pattern, "reason": self.reason}


@dataclass
class PassResult:
    model: onnx.ModelProto
    records: list[dict[str, Any]] = field(default_factory=list)   # one per rewritten tensor
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def modified(self) -> bool:
        return bool(self.records)


class GraphPass(ABC):
    """A rewrite of a training graph: ``run(model) -> PassResult``; the input model is never mutated."""

    name: str

    @abstractmethod
    def run(self, model: onnx.ModelProto) -> PassResult: ...

    @staticmethod
    def copy(model: onnx.ModelProto) -> onnx.ModelProto:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out


def ensure_opset(model: onnx.ModelProto, domain: str, version: int = 1) -> None:
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(domain, version))


def require_training_graph(model: onnx.ModelProto) -> None:
    from ..analysis import find_boundary

    find_boundary(model.graph)  # raises OnnxcompError for an inference-only graph


def unique_name(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def check_model(model: onnx.ModelProto, where: str) -> None:
    """onnx.checker (with shape inference) on a rewritten graph.

    ORT puts a few training ops with no ONNX schema (MaxPoolGrad) in the default domain, which the checker
    rejects even in untouched graphs; a copy with those moved to com.microsoft is checked instead, so
    everything else — names, topological order, types, our custom ops' wiring — is verified.
    """
    import onnx.defs

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for node in probe.graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, ""):
            node.domain = "com.microsoft"
    try:
        onnx.checker.check_model(probe, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise OnnxcompError(f"{where}: the rewritten graph failed onnx.checker: {str(exc).splitlines()[0]}") from None
