"""Analyse an ONNX Runtime training graph: classify every tensor, its lifetime, and each stash's pattern."""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import onnx

from ..planner.buffers import Buffer
from ..metadata import PLAN_METADATA_KEY
from .boundary import Boundary, find_boundary, known_op_type
from .patterns import SEE_THROUGH, StashUse, applicable_encodings, pattern_of, sparse_source, view_source
from .shapes import TensorType, resolve_shapes, static_batch


class TensorClass(str, Enum):
    PARAMETER = "parameter"
    GRAD_BUFFER = "gradient/optimizer buffer"
    INPUT = "input"
    CONSTANT = "constant"
    STASHED = "stashed"
    IMMEDIATE = "immediately consumed"
    GRADIENT_MAP = "gradient map"


# ORT CPU kernels that return a view of their first input (Alias(0,0)): no new buffer.
ALIAS_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
# Outputs written in place into their first input's buffer.
INPLACE_OPS = {"InPlaceAccumulatorV2", "InPlaceAccumulator"}


@dataclass
class TensorInfo:
    name: str
    cls: TensorClass
    type: TensorType
    producer: int | None            # node index, None for graph inputs / initializers
    consumers: list[int]
    alias_of: str | None = None     # the tensor whose buffer this one shares
    size_hint: int | None = None    # predicted bytes of a data-dependent payload (shape not static)

    @property
    def nbytes(self) -> int:
        n = self.type.nbytes
        return n if n is not None else (self.size_hint or 0)

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self.type.shape


@dataclass
class StashedTensor:
    name: str
    shape: tuple[int, ...] | None
    dtype: str
    nbytes: int
    producer: int | None
    producer_op: str
    forward_consumers: list[int]
    backward_consumers: list[int]
    backward_consumer_ops: list[str]
    pattern: str
    encodings: tuple[str, ...]
    use: StashUse

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape) if self.shape else None, "dtype": self.dtype,
                "bytes": self.nbytes, "producer": self.producer_op or "graph input",
                "backward_consumers": self.backward_consumer_ops, "pattern": self.pattern,
                "encodings": list(self.encodings)}


@dataclass
class GraphAnalysis:
    model: onnx.ModelProto
    boundary: Boundary
    tensors: dict[str, TensorInfo]
    stashed: list[StashedTensor]
    data_inputs: list[str]
    batch: int | None
    unresolved: list[str] = field(default_factory=list)  # tensors whose shape could not be resolved

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.model.graph.node)

    @property
    def n_steps(self) -> int:
        return len(self.model.graph.node)

    def breakdown(self) -> dict[str, int]:
        """Bytes per tensor class (aliases counted once, at their buffer)."""
        out = {c.value: 0 for c in TensorClass}
        for t in self.tensors.values():
            if t.alias_of is None:
                out[t.cls.value] += t.nbytes
        return out

    def lifetime(self, name: str) -> tuple[int, int]:
        """Execution steps [first, last] over which the tensor's buffer must exist (node order)."""
        t = self.tensors[name]
        start = t.producer if t.producer is not None else 0
        end = max(t.consumers, default=start)
        if name in self._graph_outputs:
            end = self.n_steps - 1
        return start, end

    def buffers(self) -> list[Buffer]:
        """Transient buffers of one training step: everything nodes allocate, with aliases merged into
        the buffer they view. Parameters, optimizer state and graph inputs persist across steps and are
        not part of the step's peak."""
        spans: dict[str, list[int]] = {}
        for name, t in self.tensors.items():
            if t.producer is None:
                continue
            root = self._root(name)
            if self.tensors[root].producer is None:   # view of a persistent buffer
                continue
            s, e = self.lifetime(name)
            if root in spans:
                spans[root][0] = min(spans[root][0], s)
                spans[root][1] = max(spans[root][1], e)
            else:
                spans[root] = [s, e]
        return [Buffer(n, self.tensors[n].nbytes, s, e) for n, (s, e) in spans.items()]

    def is_gradient(self, name: str) -> bool:
        """A float tensor made in backward (a gradient map), as opposed to a stash, weight or int gate."""
        t = self.tensors.get(name)
        return t is not None and t.producer is not None and self.boundary.is_backward(t.producer) \
            and t.type.dtype.kind == "f"

    def incoming_gradient(self, node: int | onnx.NodeProto, exclude: str = "") -> str | None:
        """The first input of ``node`` (an index, or a node holding this graph's tensor names) that is a
        gradient, ``exclude`` aside: its dY, which exists only once backward reaches it. What passes time a
        node by so it runs just before ``node``, never in the forward pass."""
        proto = self.model.graph.node[node] if isinstance(node, int) else node
        return next((i for i in proto.input if i and i != exclude and self.is_gradient(i)), None)

    def _root(self, name: str) -> str:
        seen = set()
        while self.tensors[name].alias_of is not None and name not in seen:
            seen.add(name)
            name = self.tensors[name].alias_of
        return name

    def __post_init__(self) -> None:
        self._graph_outputs = {o.name for o in self.model.graph.output}


# How generate_artifacts names a parameter's gradient buffer input and its accumulator's output.
GRAD_BUFFER_SUFFIX = "_grad.accumulation.buffer"
GRAD_OUT_SUFFIX = "_grad.accumulation.out"


def _classify_inputs(graph: onnx.GraphProto) -> tuple[dict[str, TensorClass], list[str]]:
    names = [i.name for i in graph.input]
    nameset = set(names)
    classes: dict[str, TensorClass] = {}
    data: list[str] = []
    for name in names:
        if name.endswith(".accumulation.buffer") or name == "lazy_reset_grad":
            classes[name] = TensorClass.GRAD_BUFFER
        elif name + GRAD_BUFFER_SUFFIX in nameset:
            classes[name] = TensorClass.PARAMETER
        else:
            classes[name] = TensorClass.INPUT
            data.append(name)
    for init in graph.initializer:
        classes.setdefault(init.name, TensorClass.CONSTANT)
    return classes, data


def analyze_model(model: onnx.ModelProto, batch: int | None = None, where: str = "model") -> GraphAnalysis:
    """Analyse a training graph. ``batch`` overrides the graph's batch size for shapes and bytes."""
    graph = model.graph
    boundary = find_boundary(graph, where)
    input_classes, data_inputs = _classify_inputs(graph)
    parameters = {n for n, c in input_classes.items() if c is TensorClass.PARAMETER}
    types = resolve_shapes(model, batch, data_inputs)
    effective_batch = batch or static_batch(model, data_inputs)

    producer: dict[str, tuple[int, int]] = {}
    consumers: dict[str, list[int]] = defaultdict(list)
    for idx, node in enumerate(graph.node):
        for k, o in enumerate(node.output):
            if o:
                producer[o] = (idx, k)
        for i in node.input:
            if i:
                consumers[i].append(idx)

    unknown = TensorType(None, np.dtype(np.float32))
    tensors: dict[str, TensorInfo] = {}
    for name, cls in input_classes.items():
        tensors[name] = TensorInfo(name, cls, types.get(name, unknown), None, sorted(set(consumers[name])))
    for name, (idx, k) in producer.items():
        node = graph.node[idx]
        in_backward = boundary.is_backward(idx)
        cons = sorted(set(consumers[name]))
        if not in_backward:
            cls = (TensorClass.STASHED if any(boundary.is_backward(c) for c in cons)
                   else TensorClass.IMMEDIATE)
        elif name.endswith("_grad") and name[: -len("_grad")] in parameters or node.op_type in INPLACE_OPS:
            cls = TensorClass.GRAD_BUFFER
        else:
            cls = TensorClass.GRADIENT_MAP
        alias = None
        if node.op_type in ALIAS_OPS | INPLACE_OPS and k == 0 and node.input and node.input[0]:
            alias = node.input[0]
        tensors[name] = TensorInfo(name, cls, types.get(name, unknown), idx, cons, alias)

    hints = next((p.value for p in model.metadata_props if p.key == PLAN_METADATA_KEY), None)
    for name, nbytes in (json.loads(hints) if hints else {}).items():
        if name in tensors and tensors[name].shape is None:
            tensors[name].size_hint = int(nbytes)

    stashed = [_stash_record(tensors[n], graph, boundary, producer, tensors)
               for n in sorted((n for n, t in tensors.items() if t.cls is TensorClass.STASHED),
                               key=lambda n: (tensors[n].producer, n))]
    unresolved = sorted(n for n, t in tensors.items()
                        if t.shape is None and t.size_hint is None and t.producer is not None)
    return GraphAnalysis(model, boundary, tensors, stashed, data_inputs, effective_batch, unresolved)


def _stash_record(t: TensorInfo, graph: onnx.GraphProto, boundary: Boundary,
                  producer: dict[str, tuple[int, int]], tensors: dict[str, TensorInfo]) -> StashedTensor:
    idx, k = producer[t.name]
    node = graph.node[idx]
    fwd = [c for c in t.consumers if not boundary.is_backward(c)]
    bwd = [c for c in t.consumers if boundary.is_backward(c)]
    uses = tuple((known_op_type(graph.node[c]), list(graph.node[c].input).index(t.name)) for c in bwd)
    upstream: list[str] = []
    cur = node
    for _ in range(4):  # walk back through views/pools to find what made it sparse
        src = cur.input[0] if cur.input else ""
        if src not in producer:
            break
        cur = graph.node[producer[src][0]]
        upstream.append(known_op_type(cur))
    sources = _built_from(graph, producer, t.name)
    use = StashUse(known_op_type(node), k, tuple(known_op_type(graph.node[c]) for c in fwd), uses,
                   t.type.dtype.kind == "f", sparse_source(node.op_type, upstream, sources),
                   view_source(known_op_type(node), upstream), upstream[0] if upstream else None, sources)
    return StashedTensor(t.name, t.shape, t.type.dtype.name, t.nbytes, idx, node.op_type, fwd, bwd,
                         [op for op, _ in uses], pattern_of(use), applicable_encodings(use), use)


def _built_from(graph: onnx.GraphProto, producer: dict[str, tuple[int, int]], name: str,
                limit: int = 64) -> tuple[str, ...]:
    """Op types of the tensors ``name`` is built from, seen through views, Concat/Split/Slice/Pad (data
    inputs only: a Pad's pads or a Reshape's shape are not sources)."""
    out: list[str] = []
    todo, seen = [name], set()
    while todo and len(seen) < limit:
        t = todo.pop()
        if t in seen or t not in producer:
            continue
        seen.add(t)
        node = graph.node[producer[t][0]]
        op = known_op_type(node)
        if op in SEE_THROUGH:
            todo += [i for i in (node.input if op == "Concat" else node.input[:1]) if i]
        else:
            out.append(op)
    return tuple(out)
