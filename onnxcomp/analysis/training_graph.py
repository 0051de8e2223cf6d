"""Analyse an ONNX Runtime training graph: classify every tensor, its lifetime, and each stash's pattern."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import onnx
import onnx_ir as ir

from ..planner.buffers import Buffer
from ..metadata import PLAN_METADATA_KEY
from .boundary import Boundary, find_boundary, known_op_type
from .patterns import SEE_THROUGH, StashUse, applicable_encodings, pattern_of, sparse_source, view_source
from .shapes import TensorType, ir_static_batch, resolve_ir_shapes


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


@dataclass(eq=False)
class GraphAnalysis:
    """What the analysis found in one graph state. Node indices are positions in ``ir_nodes`` (the onnx-ir
    graph's node list when analysed, the node list of ``model`` too)."""
    ir_model: ir.Model
    boundary: Boundary
    tensors: dict[str, TensorInfo]
    stashed: list[StashedTensor]
    data_inputs: list[str]
    batch: int | None
    unresolved: list[str] = field(default_factory=list)  # tensors whose shape could not be resolved
    ir_nodes: list[ir.Node] = field(default_factory=list, repr=False)
    # The graph as a ModelProto: given (the caller had it) or serialised on first use by ``snapshot``.
    proto: onnx.ModelProto | None = field(default=None, repr=False)
    snapshot: Callable[[], onnx.ModelProto] | None = field(default=None, repr=False)

    @property
    def model(self) -> onnx.ModelProto:
        """The analysed graph as a ``ModelProto``, for readers still on protobuf (node protos by index, the
        planner's proto entry points): serialised once, on first use, and only while the onnx-ir graph is
        still the one analysed (read it before editing)."""
        if self.proto is None:
            if list(self.ir_model.graph) != self.ir_nodes:
                raise RuntimeError("GraphAnalysis.model read after the graph was edited: read it before "
                                   "changing the graph, or analyse the new graph")
            self.proto = self.snapshot() if self.snapshot is not None else ir.serde.serialize_model(self.ir_model)
        return self.proto

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.model.graph.node)

    @property
    def n_steps(self) -> int:
        return len(self.ir_nodes)

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
        for root, span in spans.items():
            if self.unread(root):
                span[1] = self.n_steps - 1
        return [Buffer(n, self.tensors[n].nbytes, s, e) for n, (s, e) in spans.items()]

    def unread(self, name: str) -> bool:
        """A buffer no node reads (a view's producer reads the buffer it views) that is not a graph output.
        ORT releases a buffer after its last reader and builds those releases from readers only (onnxruntime
        1.19, allocation_planner.cc ``GenerateDeallocationPlan``): one nothing reads stays allocated until the
        run ends. Measured: a row-split backward's recomputed MaxPools, read only for their indices, held 16
        unread value outputs (1.5 MiB) to the end of the step, 1.1-1.3 MiB above the prediction at its peak
        (NOTES-rowsplit.md)."""
        t = self.tensors[name]
        if t.producer is None or t.consumers or name in self._graph_outputs:
            return False
        return self.ir_nodes[t.producer].op_type not in INPLACE_OPS     # those write into their input's buffer

    def is_gradient(self, name: str) -> bool:
        """A float tensor made in backward (a gradient map), as opposed to a stash, weight or int gate."""
        t = self.tensors.get(name)
        return t is not None and t.producer is not None and self.boundary.is_backward(t.producer) \
            and t.type.dtype.kind == "f"

    def incoming_gradient(self, node: int | onnx.NodeProto, exclude: str = "") -> str | None:
        """The first input of ``node`` (an index, or a node holding this graph's tensor names) that is a
        gradient, ``exclude`` aside: its dY, which exists only once backward reaches it. What passes time a
        node by so it runs just before ``node``, never in the forward pass."""
        names = ([v.name if v is not None else "" for v in self.ir_nodes[node].inputs] if isinstance(node, int)
                 else node.input)
        return next((i for i in names if i and i != exclude and self.is_gradient(i)), None)

    def _root(self, name: str) -> str:
        seen = set()
        while self.tensors[name].alias_of is not None and name not in seen:
            seen.add(name)
            name = self.tensors[name].alias_of
        return name

    def __post_init__(self) -> None:
        self._graph_outputs = {o.name for o in self.ir_model.graph.outputs}


# How generate_artifacts names a parameter's gradient buffer input and its accumulator's output.
GRAD_BUFFER_SUFFIX = "_grad.accumulation.buffer"
GRAD_OUT_SUFFIX = "_grad.accumulation.out"


def _classify_inputs(graph: ir.Graph) -> tuple[dict[str, TensorClass], list[str]]:
    names = [v.name for v in graph.inputs]
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
    for name in graph.initializers:
        classes.setdefault(name, TensorClass.CONSTANT)
    return classes, data


def analyze_model(model: onnx.ModelProto, batch: int | None = None, where: str = "model") -> GraphAnalysis:
    """Analyse a training graph given as a ``ModelProto`` (loaded into onnx-ir for it; a model already in
    onnx-ir is analysed by ``analyze_ir``, or ``analysis_of`` for the cached analysis of its graph state).
    ``batch`` overrides the graph's batch size for shapes and bytes."""
    return analyze_ir(ir.serde.deserialize_model(model), batch, where, proto=model)


def analyze_ir(model: ir.Model, batch: int | None = None, where: str = "model", *,
               proto: onnx.ModelProto | None = None,
               snapshot: Callable[[], onnx.ModelProto] | None = None) -> GraphAnalysis:
    """Analyse the training graph of an onnx-ir model: tensor classes, lifetimes (node indices) and stashes,
    from the values' types and their use/def links. ``proto``/``snapshot``: the same graph as a
    ``ModelProto`` or how to get it (``GraphAnalysis.model``)."""
    graph = model.graph
    nodes = list(graph)
    boundary = find_boundary(graph, where, nodes)
    input_classes, data_inputs = _classify_inputs(graph)
    parameters = {n for n, c in input_classes.items() if c is TensorClass.PARAMETER}
    types = resolve_ir_shapes(model, nodes, data_inputs, batch, proto)
    effective_batch = batch or ir_static_batch(model, data_inputs)
    index = {node: k for k, node in enumerate(nodes)}

    def consumers(value: ir.Value) -> list[int]:
        return sorted({index[user] for user, _ in value.uses() if user in index})

    unknown = TensorType(None, np.dtype(np.float32))
    values = {v.name: v for v in [*graph.inputs, *graph.initializers.values()]}
    tensors: dict[str, TensorInfo] = {}
    for name, cls in input_classes.items():
        tensors[name] = TensorInfo(name, cls, types.get(name, unknown), None, consumers(values[name]))
    produced: dict[str, tuple[ir.Value, ir.Node, int, int]] = {}     # by walking the nodes: no producer() calls
    for idx, node in enumerate(nodes):
        for k, value in enumerate(node.outputs):
            if value.name:
                produced[value.name] = (value, node, idx, k)
    for name, (value, node, idx, k) in produced.items():
        in_backward = boundary.is_backward(idx)
        cons = consumers(value)
        if not in_backward:
            cls = (TensorClass.STASHED if any(boundary.is_backward(c) for c in cons)
                   else TensorClass.IMMEDIATE)
        elif name.endswith("_grad") and name[: -len("_grad")] in parameters or node.op_type in INPLACE_OPS:
            cls = TensorClass.GRAD_BUFFER
        else:
            cls = TensorClass.GRADIENT_MAP
        alias = None
        if node.op_type in ALIAS_OPS | INPLACE_OPS and k == 0 and node.inputs and node.inputs[0] is not None \
                and node.inputs[0].name:
            alias = node.inputs[0].name
        tensors[name] = TensorInfo(name, cls, types.get(name, unknown), idx, cons, alias)

    hints = model.metadata_props.get(PLAN_METADATA_KEY)
    for name, nbytes in (json.loads(hints) if hints else {}).items():
        if name in tensors and tensors[name].shape is None:
            tensors[name].size_hint = int(nbytes)

    stashed = [_stash_record(tensors[n], produced[n][0], nodes, boundary, index)
               for n in sorted((n for n, t in tensors.items() if t.cls is TensorClass.STASHED),
                               key=lambda n: (tensors[n].producer, n))]
    unresolved = sorted(n for n, t in tensors.items()
                        if t.shape is None and t.size_hint is None and t.producer is not None)
    return GraphAnalysis(model, boundary, tensors, stashed, data_inputs, effective_batch, unresolved, nodes,
                         proto, snapshot)


def _producer_in(value: ir.Value | None, index: dict[ir.Node, int]) -> ir.Node | None:
    """The node of the analysed graph that makes ``value``, if any."""
    node = value.producer() if value is not None else None
    return node if node is not None and node in index else None


def _stash_record(t: TensorInfo, value: ir.Value, nodes: list[ir.Node], boundary: Boundary,
                  index: dict[ir.Node, int]) -> StashedTensor:
    node = nodes[t.producer]
    k = value.index()
    fwd = [c for c in t.consumers if not boundary.is_backward(c)]
    bwd = [c for c in t.consumers if boundary.is_backward(c)]
    uses = tuple((known_op_type(nodes[c]), next(s for s, v in enumerate(nodes[c].inputs) if v is value))
                 for c in bwd)
    upstream: list[str] = []
    cur = node
    for _ in range(4):  # walk back through views/pools to find what made it sparse
        cur = _producer_in(cur.inputs[0] if cur.inputs else None, index)
        if cur is None:
            break
        upstream.append(known_op_type(cur))
    sources = _built_from(value, index)
    use = StashUse(known_op_type(node), k, tuple(known_op_type(nodes[c]) for c in fwd), uses,
                   t.type.dtype.kind == "f", sparse_source(node.op_type, upstream, sources),
                   view_source(known_op_type(node), upstream), upstream[0] if upstream else None, sources)
    return StashedTensor(t.name, t.shape, t.type.dtype.name, t.nbytes, t.producer, node.op_type, fwd, bwd,
                         [op for op, _ in uses], pattern_of(use), applicable_encodings(use), use)


def _built_from(value: ir.Value, index: dict[ir.Node, int], limit: int = 64) -> tuple[str, ...]:
    """Op types of the tensors ``value`` is built from, seen through views, Concat/Split/Slice/Pad (data
    inputs only: a Pad's pads or a Reshape's shape are not sources)."""
    out: list[str] = []
    todo: list[ir.Value] = [value]
    seen: set[ir.Value] = set()
    while todo and len(seen) < limit:
        t = todo.pop()
        node = _producer_in(t, index)
        if t in seen or node is None:
            continue
        seen.add(t)
        op = known_op_type(node)
        if op in SEE_THROUGH:
            todo += [v for v in (node.inputs if op == "Concat" else node.inputs[:1]) if v is not None and v.name]
        else:
            out.append(op)
    return tuple(out)
