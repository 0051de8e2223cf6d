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


# Shared int64 constants of the one-element slices that time a node by a tensor (see zero_after).
TRIGGER_CONSTANTS = (("onnxcomp_trigger_start", [0]), ("onnxcomp_trigger_end", [1]),
                     ("onnxcomp_trigger_flat_shape", [-1]))


def trigger_constants(graph: onnx.GraphProto) -> tuple[str, str, str]:
    """Names of the start/end/flat-shape initializers, added to ``graph`` once."""
    have = {i.name for i in graph.initializer}
    for name, value in TRIGGER_CONSTANTS:
        if name not in have:
            graph.initializer.append(onnx.helper.make_tensor(name, onnx.TensorProto.INT64, [1], value))
    start, end, flat = (n for n, _ in TRIGGER_CONSTANTS)
    return start, end, flat


def zero_after(graph: onnx.GraphProto, tensor: str, elem: int, base: str, taken: set[str], *,
               to_float: bool = False) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], str]:
    """Nodes computing an int64 [1] zero from one element of ``tensor`` (element type ``elem``).

    ``Less(t, t)`` is false for every value (NaN and ±Inf included), so adding the zero to a shape and
    reshaping by it is an exact, zero-copy view; but ORT can neither constant-fold it nor run the reader
    before ``tensor`` exists, under either execution order. ``to_float``: Cast the element to float first
    (ORT's CPU Less has no float16 kernel). Returns (nodes, value_infos, zero)."""
    from onnx import TensorProto, helper

    start, end, minus_one = trigger_constants(graph)
    flat, one, f32, less, zero = (unique_name(f"{base}_{s}", taken) for s in ("flat", "trigger", "f32", "less", "zero"))
    nodes = [helper.make_node("Reshape", [tensor, minus_one], [flat], name=unique_name(f"{flat}__reshape", taken)),
             helper.make_node("Slice", [flat, start, end], [one], name=unique_name(f"{one}__slice", taken))]
    infos = [helper.make_tensor_value_info(flat, elem, None), helper.make_tensor_value_info(one, elem, [1])]
    if to_float:
        nodes.append(helper.make_node("Cast", [one], [f32], to=TensorProto.FLOAT, name=unique_name(f"{f32}__cast", taken)))
        infos.append(helper.make_tensor_value_info(f32, TensorProto.FLOAT, [1]))
        one = f32
    nodes += [helper.make_node("Less", [one, one], [less], name=unique_name(f"{less}__less", taken)),
              helper.make_node("Cast", [less], [zero], to=TensorProto.INT64, name=unique_name(f"{zero}__cast", taken))]
    infos += [helper.make_tensor_value_info(less, TensorProto.BOOL, [1]),
              helper.make_tensor_value_info(zero, TensorProto.INT64, [1])]
    return nodes, infos, zero


class NodeBuilder:
    """Collects new nodes (``.nodes``) and their typed value_infos (``.infos``) under one name prefix; the
    pass decides where in the node list they go."""

    def __init__(self, graph: onnx.GraphProto, taken: set[str], prefix: str) -> None:
        self.graph, self.taken, self.prefix = graph, taken, prefix
        self.nodes: list[onnx.NodeProto] = []
        self.infos: list[onnx.ValueInfoProto] = []

    def tensor(self, base: str, elem: int, shape: list[int] | None) -> str:
        name = unique_name(f"{self.prefix}_{base}", self.taken)
        self.infos.append(onnx.helper.make_tensor_value_info(name, elem, shape))
        return name

    def op(self, op: str, inputs: list[str], base: str, elem: int, shape: list[int] | None,
           domain: str = "", **attrs: Any) -> str:
        out = self.tensor(base, elem, shape)
        self.nodes.append(onnx.helper.make_node(op, inputs, [out], name=unique_name(f"{out}__{op.lower()}", self.taken),
                                                domain=domain, **attrs))
        return out

    def const(self, base: str, elem: int, values: list[int]) -> str:
        name = unique_name(f"{self.prefix}_{base}", self.taken)
        self.graph.initializer.append(onnx.helper.make_tensor(name, elem, [len(values)], values))
        return name

    def zero_after(self, tensor: str, elem: int) -> str:
        nodes, infos, zero = zero_after(self.graph, tensor, elem, f"{self.prefix}_gate", self.taken,
                                        to_float=elem == onnx.TensorProto.FLOAT16)
        self.nodes += nodes
        self.infos += infos
        return zero


def node_attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    """The value of ``node``'s attribute ``name``, or ``default`` when it is absent."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def even_bounds(n: int, k: int) -> list[int]:
    """``k + 1`` bounds cutting ``range(n)`` into ``k`` spans whose lengths differ by at most one."""
    return [round(i * n / k) for i in range(k + 1)]


def taken_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor and node name in use in ``graph`` (what unique_name must avoid)."""
    return {o for n in graph.node for o in n.output} | {n.name for n in graph.node} | \
        {i.name for i in graph.input} | {i.name for i in graph.initializer} | {o.name for o in graph.output}


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
