"""Resolve every tensor's static shape and dtype for one batch size.

ONNX shape inference covers the standard ops; ORT's training ops (com.microsoft ...Grad, BatchNormInternal)
have no ONNX schema, so their outputs are filled by rules: a gradient named ``X_grad`` has X's shape, and the
few multi-output training ops get per-output rules.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from ..errors import OnnxcompError


def numel(shape: tuple[int, ...] | list[int]) -> int:
    """Elements of a static shape (1 for a scalar)."""
    return int(np.prod(shape, dtype=np.int64))


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...] | None   # None: unknown rank/dims
    dtype: np.dtype

    @property
    def nbytes(self) -> int | None:
        if self.shape is None:
            return None
        return numel(self.shape) * self.dtype.itemsize


@functools.lru_cache(maxsize=None)
def _np_dtype(elem_type: int) -> np.dtype:
    if elem_type == 0:
        return np.dtype(np.float32)
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except KeyError:  # e.g. bfloat16/float8 without a numpy type: size it as uint8/uint16
        return np.dtype(np.uint16 if elem_type == onnx.TensorProto.BFLOAT16 else np.uint8)


def _type_of(value_info: onnx.ValueInfoProto) -> TensorType | None:
    t = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        return None
    dtype = _np_dtype(t.elem_type)
    if not t.HasField("shape"):
        return TensorType(None, dtype)
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            return TensorType(None, dtype)
    return TensorType(tuple(dims), dtype)


def _with_batch(model: onnx.ModelProto, batch: int | None, data_inputs: list[str]) -> onnx.ModelProto:
    """Copy of the model whose data inputs' first dim is ``batch`` (symbolic dims elsewhere left for inference)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if batch is None:
        return m
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if dims and (vi.name in data_inputs or not dims[0].HasField("dim_value")):
            dims[0].Clear()
            dims[0].dim_value = batch
    # Intermediate shapes were declared for the exported batch: drop them and let inference redo them.
    del m.graph.value_info[:]
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return m


def static_batch(model: onnx.ModelProto, data_inputs: list[str]) -> int | None:
    """The graph's fixed batch size (first dim of its data inputs), None if dynamic."""
    for vi in model.graph.input:
        if vi.name in data_inputs:
            dims = vi.type.tensor_type.shape.dim
            if dims and dims[0].HasField("dim_value"):
                return int(dims[0].dim_value)
    return None


def _collect(model: onnx.ModelProto, types: dict[str, TensorType]) -> None:
    for init in model.graph.initializer:
        types.setdefault(init.name, TensorType(tuple(int(d) for d in init.dims), _np_dtype(init.data_type)))
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        t = _type_of(vi)
        if t is not None and (vi.name not in types or types[vi.name].shape is None):
            types[vi.name] = t


# Set to a dict by a planning session (planner/memo.py) and to None after it: graphs with the same nodes,
# inputs, initializers and declared types (in any node order: the planner predicts reordered copies of
# every trial graph) are typed once.
SESSION_CACHE: dict | None = None


def resolve_shapes(model: onnx.ModelProto, batch: int | None = None,
                   data_inputs: list[str] | None = None) -> dict[str, TensorType]:
    """Shapes and dtypes of graph inputs, initializers and node outputs (unknown ones map to shape None).

    ONNX inference stops at ops it has no schema for, so inference and the training-op rules alternate
    until nothing new is learnt.
    """
    if SESSION_CACHE is None:
        return _resolve_shapes(model, batch, data_inputs)
    key = (batch, tuple(data_inputs or ()), _graph_key(model))
    if key not in SESSION_CACHE:
        SESSION_CACHE[key] = _resolve_shapes(model, batch, data_inputs)
    return dict(SESSION_CACHE[key])


def _graph_key(model: onnx.ModelProto) -> bytes:
    """A digest of what inference reads, independent of node order."""
    import hashlib

    g = model.graph
    h = hashlib.blake2b(digest_size=20)
    for part in sorted(n.SerializeToString(deterministic=True) for n in g.node):
        h.update(len(part).to_bytes(8, "little") + part)
    for group in (g.input, g.output, g.value_info, g.initializer, model.opset_import):
        h.update(b"|")
        for part in sorted(x.SerializeToString(deterministic=True) for x in group):
            h.update(len(part).to_bytes(8, "little") + part)
    return h.digest()


def _resolve_shapes(model: onnx.ModelProto, batch: int | None,
                    data_inputs: list[str] | None) -> dict[str, TensorType]:
    m = _with_batch(model, batch, data_inputs or [])
    types: dict[str, TensorType] = {}
    for _ in range(6):
        try:
            m = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
        except Exception as exc:
            raise OnnxcompError(f"ONNX shape inference failed{f' for batch {batch}' if batch else ''}: "
                                f"{str(exc).splitlines()[0]}") from None
        before = sum(t.shape is not None for t in types.values())
        _collect(m, types)
        _fill_training_op_shapes(m.graph, types)
        if sum(t.shape is not None for t in types.values()) == before:
            break
        declared = {vi.name for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
        for name, t in types.items():
            if t.shape is not None and name not in declared:
                elem = helper.np_dtype_to_tensor_dtype(t.dtype)
                m.graph.value_info.append(helper.make_tensor_value_info(name, elem, list(t.shape)))
    return types


def _known(types: dict[str, TensorType], name: str) -> TensorType | None:
    t = types.get(name)
    return t if t is not None and t.shape is not None else None


# Per-op output rules for ORT training ops: output index -> index of the input whose shape it has.
_SAME_AS_INPUT: dict[str, dict[int, int]] = {
    "BatchNormInternal": {0: 0, 1: 1, 2: 1, 3: 1, 4: 1},
    "BatchNormalizationGrad": {0: 0, 1: 2, 2: 2},
    "ConvGrad": {0: 1, 1: 2},
    "ReluGrad": {0: 1},
    "LeakyReluGrad": {0: 1},
    "GeluGrad": {0: 1},
    "SigmoidGrad": {0: 1},
    "TanhGrad": {0: 1},
    "MaxPoolGrad": {},
    "Scale": {0: 0},
    "DropoutGrad": {0: 0},
    "SoftmaxGrad": {0: 0},
    "SoftmaxGrad_13": {0: 0},
    "BiasGeluGrad_dX": {0: 1},
    "InPlaceAccumulatorV2": {0: 0},
}


# A node as the shape rules read it: op type, input names, output names ("" for an empty slot).
NodeNames = tuple[str, Sequence[str], Sequence[str]]


def _fill_training_op_shapes(graph: onnx.GraphProto | Iterable[NodeNames], types: dict[str, TensorType]) -> None:
    nodes = ([(n.op_type, n.input, n.output) for n in graph.node] if isinstance(graph, onnx.GraphProto)
             else list(graph))
    # Iterate in node order (topological), repeating once in case a rule needs a later fill.
    for _ in range(2):
        for op_type, inputs, outputs in nodes:
            rules = _SAME_AS_INPUT.get(op_type, {})
            for k, out in enumerate(outputs):
                if not out or _known(types, out):
                    continue
                src = None
                if k in rules and rules[k] < len(inputs):
                    src = _known(types, inputs[rules[k]])
                if op_type == "ConcatTraining" and k == 1:  # per_input_length: int64 [number of inputs]
                    src = TensorType((len(inputs),), np.dtype(np.int64))
                if op_type == "ConvGrad" and k == 2:  # bias grad: [C_out]
                    w = _known(types, inputs[2])
                    src = TensorType((w.shape[0],), w.dtype) if w else None
                if src is None and out.endswith("_grad"):
                    src = _known(types, out[: -len("_grad")])
                if src is not None:
                    dtype = types[out].dtype if out in types else src.dtype
                    types[out] = TensorType(src.shape, dtype)


# ---------------------------------------------------------------------------------------------- onnx-ir
# The analysis reads types and shapes off the ``ir.Value``s. Values the onnx-ir model does not type
# statically (a training graph's intermediates as exported; not what the editor makes: it types what it
# creates) are resolved by ONNX shape inference, which needs a ``ModelProto`` (the one at hand, else one
# serialised for it), once: the result is remembered in the value's ``meta`` (never serialised, carried by
# ``model.clone()``), keyed by what made the value, so a later graph state infers only for values it has
# not seen.
_INFERRED_KEY = "onnxcomp.inferred_type"
# Domains ONNX shape inference has schemas for: other ops' outputs it cannot type, so they never need it.
_INFERABLE_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})


def value_type(value: ir.Value) -> TensorType | None:
    """The value's dtype and static shape as ONNX shape inference would read them from its ValueInfo
    (shape None unless every dim is a known size); None when the value carries no tensor type."""
    if not isinstance(value.type, ir.TensorType):
        return None
    dtype = _np_dtype(int(value.dtype))
    shape = value.shape
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return TensorType(None, dtype)
    return TensorType(tuple(int(d) for d in shape), dtype)


def _is_static(value: ir.Value) -> bool:
    shape = value.shape
    return isinstance(value.type, ir.TensorType) and shape is not None and \
        all(isinstance(d, int) and d >= 0 for d in shape)


def _initializer_type(value: ir.Value) -> TensorType | None:
    tensor = value.const_value
    return None if tensor is None else TensorType(tuple(int(d) for d in tensor.shape), _np_dtype(int(tensor.dtype)))


def _node_names(node: ir.Node) -> NodeNames:
    return (node.op_type, [v.name or "" if v is not None else "" for v in node.inputs],
            [v.name or "" for v in node.outputs])


def _made_by(node: ir.Node) -> tuple:
    """What an inferred type depends on: the op and the tensors it reads (names are single-assignment)."""
    return (node.domain, node.op_type, tuple(v.name if v is not None else "" for v in node.inputs))


def share_inferred(source: ir.Model, target: ir.Model) -> None:
    """Hand ``target`` (e.g. the graph a clone was made from) the types inference found for ``source``'s values
    of the same name made the same way, so its own analysis does not infer them again."""
    found = {v.name: v.meta[_INFERRED_KEY] for n in source.graph for v in n.outputs if _INFERRED_KEY in v.meta}
    for node in target.graph:
        for value in node.outputs:
            seen = found.get(value.name)
            if seen is not None and _INFERRED_KEY not in value.meta and seen[0] == _made_by(node):
                value.meta[_INFERRED_KEY] = seen


def ir_static_batch(model: ir.Model, data_inputs: list[str]) -> int | None:
    """``static_batch`` of an onnx-ir model."""
    for value in model.graph.inputs:
        if value.name in data_inputs and value.shape is not None and len(value.shape) \
                and isinstance(value.shape[0], int):
            return int(value.shape[0])
    return None


def resolve_ir_shapes(model: ir.Model, nodes: Sequence[ir.Node], data_inputs: list[str],
                      batch: int | None = None, proto: onnx.ModelProto | None = None) -> dict[str, TensorType]:
    """``resolve_shapes`` for an onnx-ir model (``nodes``: its graph's nodes in order; ``proto``: the same graph
    as a ModelProto if at hand): the same table, read off the values. ONNX inference runs only when an ONNX
    op's output has no static shape and was not inferred before; at another ``batch`` every shape is inferred
    again (the declared ones are for the exported batch)."""
    if batch is not None:
        return resolve_shapes(proto or ir.serde.serialize_model(model), batch, data_inputs)
    graph = model.graph
    made = [(o, n) for n in nodes for o in n.outputs if o.name]
    values = [v for v in graph.inputs if v.name] + [o for o, _ in made]
    # First what ONNX inference may still type: an ONNX op's output without a static shape, never inferred
    # as made now. If any, the protobuf path, once, remembered per value.
    remembered: dict[ir.Value, TensorType | None] = {}
    unknown: list[ir.Value] = []
    for value, producer in made:
        if _is_static(value):
            continue
        seen = value.meta.get(_INFERRED_KEY)
        if seen is not None and seen[0] == _made_by(producer):
            remembered[value] = seen[1]
        elif producer.domain in _INFERABLE_DOMAINS:
            unknown.append(value)
    if unknown:
        types = resolve_shapes(proto or ir.serde.serialize_model(model), None, data_inputs)
        for value in unknown:
            value.meta[_INFERRED_KEY] = (_made_by(value.producer()), types.get(value.name))
        return types
    types: dict[str, TensorType] = {}
    for value in graph.initializers.values():
        t = _initializer_type(value)
        if t is not None and value.name is not None:
            types.setdefault(value.name, t)
    for value in values:
        t = value_type(value)
        if remembered.get(value) is not None:
            t = remembered[value]
        if t is not None and (value.name not in types or types[value.name].shape is None):
            types[value.name] = t
    _fill_training_op_shapes([_node_names(n) for n in nodes], types)
    return types
