"""What every graph pass shares: the result type, and graph-editing helpers that keep ORT's order right."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..errors import OnnxcompError

from ..custom_ops import contract
from ..metadata import PLAN_METADATA_KEY  # noqa: F401  (re-export)
from .editor import (TRIGGER_CONSTANTS, taken_names, trigger_constants,  # noqa: F401  (re-export)
                     unique_name, zero_after)
from .records import PassRecord

CUSTOM_DOMAIN = contract.DOMAIN  # re-export


@dataclass
class Skipped:
    name: str
    pattern: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "pattern": self.pattern, "reason": self.reason}


@dataclass
class PassResult:
    """What a pass did: the model, its records (one schema, passes.records) and the candidates it left.

    ``modified``: the pass changed the graph — every change is recorded, so a pass with records modified
    it; ``changed`` covers edits no record describes (e.g. an order chain rebuilt in place)."""
    model: onnx.ModelProto
    records: list[PassRecord] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    changed: bool = False

    @property
    def modified(self) -> bool:
        return self.changed or bool(self.records)


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


def declare_custom_ops(model: onnx.ModelProto) -> None:
    """Import onnxcomp's custom-op domain and record the op-set version the inserted ops follow."""
    ensure_opset(model, contract.DOMAIN, contract.DOMAIN_VERSION)
    onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                        contract.OPSET_METADATA_KEY: str(contract.OPSET_VERSION)})


def require_training_graph(model: onnx.ModelProto) -> None:
    from ..analysis import find_boundary

    find_boundary(model.graph)  # raises OnnxcompError for an inference-only graph


def node_attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    """The value of ``node``'s attribute ``name``, or ``default`` when it is absent."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def even_bounds(n: int, k: int) -> list[int]:
    """``k + 1`` bounds cutting ``range(n)`` into ``k`` spans whose lengths differ by at most one."""
    return [round(i * n / k) for i in range(k + 1)]


def check_model(model: onnx.ModelProto, where: str) -> None:
    """onnx.checker (with shape inference) on a rewritten graph.

    ORT puts a few training ops with no ONNX schema (MaxPoolGrad) in the default domain, which the checker
    rejects even in untouched graphs; a copy with those moved to com.microsoft is checked instead, so
    everything else — names, topological order, types, our custom ops' wiring — is verified.
    """
    import onnx.defs

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    # Also ops ONNX defines only at a later opset: ORT's optimizer writes its own LayerNormalization
    # (registered from opset 1) into opset-16 transformer graphs.
    version = next((o.version for o in probe.opset_import if o.domain in ("", "ai.onnx")), 1)
    for node in probe.graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, version, ""):
            node.domain = "com.microsoft"
    try:
        onnx.checker.check_model(probe, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise OnnxcompError(f"{where}: the rewritten graph failed onnx.checker: {str(exc).splitlines()[0]}") from None
