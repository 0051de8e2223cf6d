"""Pass: split a large fully connected weight into row blocks, so its gradient never exists in one piece.

ORT computes a Gemm's weight gradient dW = dYᵀ·X into a fresh tensor of the weight's full size and only then
adds it to the gradient buffer (InPlaceAccumulatorV2). For VGG-16's first classifier layer at 64×64 that
transient is 4096×25088 floats, 392 MiB: more than all of its encoded activations together, so no activation
scheme can cut that net's training-step peak by more than 1.75×. ONNX has no in-place slice update, and a
PyOp cannot write into ORT's buffer (the bridge copies its inputs), so the block has to be a parameter of its
own: ``W`` [N, K] becomes ``W.part0`` … ``W.part{p-1}``, row blocks [n_j, K] of at most ``split_weight_bytes``.

For a forward ``Y = Gemm(X, W, b, transB=1)`` with row bounds r_0 = 0 < … < r_p = N:

    forward    Y    = Concat_j Gemm(X, W_j, b[r_j:r_{j+1}], transB=1)    (axis 1)
    backward   dY_j = dY[:, r_j:r_{j+1}]
               dW_j = Gemm(dY_j, X, transA=1)  → its own accumulator, right behind it
               dX   = Σ_j Gemm(dY_j, W_j)          (a running sum of Adds)

Every forward output and every weight-gradient element is the same dot product over the same operands as
before; only dX is summed in p partial products, so it differs from ORT's by rounding. The pass therefore
belongs to the lossy policies, and it changes the artifact set, not just the training graph: the checkpoint
holds the blocks in place of ``W`` and the eval model reads them (``runtime.checkpoint.write_split_artifacts``
writes both); ``runtime.checkpoint.merged_parameters`` gives the user's original names back.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..analysis.training_graph import GRAD_BUFFER_SUFFIX, GRAD_OUT_SUFFIX
from ..errors import OnnxcompError
from .records import PassRecord
from .editor import GraphEditor
from .base import (GraphPass, PassResult, Skipped, check_model, node_attr, require_training_graph,
                   taken_names, unique_name)

PART_INFIX = ".part"
# Metadata key of a training / eval model whose weights were split: JSON list of WeightSplit.to_dict().
SPLIT_METADATA_KEY = "onnxcomp.split_weights"


@dataclass(frozen=True)
class WeightSplit:
    """``parameter`` [N, K] held as row blocks ``parts``; block j is rows bounds[j]:bounds[j+1]."""

    parameter: str
    parts: tuple[str, ...]
    bounds: tuple[int, ...]
    shape: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {"parameter": self.parameter, "parts": list(self.parts), "bounds": list(self.bounds),
                "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WeightSplit":
        return cls(data["parameter"], tuple(data["parts"]), tuple(data["bounds"]), tuple(data["shape"]))


def _static_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
        return None
    return tuple(d.dim_value for d in t.shape.dim)


def _row_bounds(rows: int, parts: int) -> tuple[int, ...]:
    """Even row blocks (the first ``rows % parts`` one row longer)."""
    step, extra = divmod(rows, parts)
    bounds = [0]
    for j in range(parts):
        bounds.append(bounds[-1] + step + (1 if j < extra else 0))
    return tuple(bounds)


def record_splits(model: onnx.ModelProto, splits: Iterable[WeightSplit]) -> None:
    """Write the splits into ``model``'s metadata (merged with any an earlier transform recorded)."""
    known = splits_of(model)
    known += [s for s in splits if s.parameter not in {k.parameter for k in known}]
    if known:
        props = {p.key: p.value for p in model.metadata_props}
        onnx.helper.set_model_props(model, props | {SPLIT_METADATA_KEY: json.dumps([s.to_dict() for s in known])})


def splits_made(result: PassResult) -> list[WeightSplit]:
    """The splits a SplitWeightPass run made, from its records."""
    return [WeightSplit.from_dict(r.detail) for r in result.records if r.kind == "split_weight"]


def splits_of(model: onnx.ModelProto) -> list[WeightSplit]:
    for p in model.metadata_props:
        if p.key == SPLIT_METADATA_KEY:
            return [WeightSplit.from_dict(d) for d in json.loads(p.value)]
    return []


def _prefix(param: str) -> str:
    return f"onnxcomp_split_{param.replace('/', '_').strip('_')}"


def _slice(b: GraphEditor, tensor: str, lo: int, hi: int, axis: int, base: str) -> str:
    start, end, axes = (b.const(f"{base}_{k}", TensorProto.INT64, [v]) for k, v in (("start", lo), ("end", hi),
                                                                                      ("axis", axis)))
    return b.op("Slice", [tensor, start, end, axes], base, TensorProto.FLOAT, None)


def split_forward_gemm(graph: onnx.GraphProto, split: WeightSplit, taken: set[str] | None = None) -> bool:
    """Replace the forward ``Gemm(X, W, b, transB=1)`` reading ``split.parameter`` by per-block Gemms and a
    Concat (the eval model's whole rewrite; the training graph's forward half). False if there is none."""
    nodes = list(graph.node)
    idx = next((i for i, n in enumerate(nodes) if n.op_type == "Gemm" and len(n.input) > 1
                and n.input[1] == split.parameter and node_attr(n, "transB", 0) == 1), None)
    if idx is None:
        return False
    b = GraphEditor(graph, taken if taken is not None else taken_names(graph), _prefix(split.parameter))
    gemm = nodes[idx]
    x, bias = gemm.input[0], (gemm.input[2] if len(gemm.input) > 2 and gemm.input[2] else None)
    keep = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    outs = []
    for j, part in enumerate(split.parts):
        inputs = [x, part]
        if bias is not None:
            inputs.append(_slice(b, bias, split.bounds[j], split.bounds[j + 1], 0, f"bias{j}"))
        outs.append(b.op("Gemm", inputs, f"y{j}", TensorProto.FLOAT, None, **keep))
    b.nodes.append(helper.make_node("Concat", outs, [gemm.output[0]], axis=1,
                                    name=unique_name(f"{b.prefix}_concat", b.taken)))
    del graph.node[:]
    graph.node.extend(nodes[:idx] + b.nodes + nodes[idx + 1:])
    graph.value_info.extend(b.infos)
    _replace_input(graph, split)
    return True


def _replace_input(graph: onnx.GraphProto, split: WeightSplit, suffix: str = "") -> None:
    """Graph input ``parameter+suffix`` → one input per block, in its place."""
    inputs = list(graph.input)
    k = next(i for i, vi in enumerate(inputs) if vi.name == split.parameter + suffix)
    elem = inputs[k].type.tensor_type.elem_type
    cols = split.shape[1]
    parts = [helper.make_tensor_value_info(p + suffix, elem, [split.bounds[j + 1] - split.bounds[j], cols])
             for j, p in enumerate(split.parts)]
    del graph.input[:]
    graph.input.extend(inputs[:k] + parts + inputs[k + 1:])


class SplitWeightPass(GraphPass):
    """split_weight_bytes: largest weight block kept in one piece (None: the pass does nothing, the default —
    the split renames the user's parameter, so it is asked for, never implied)."""

    name = "split_weight"

    def __init__(self, split_weight_bytes: int | None = None) -> None:
        if split_weight_bytes is not None and split_weight_bytes <= 0:
            raise OnnxcompError(f"split_weight_bytes must be > 0 (got {split_weight_bytes})")
        self.max_part_bytes = split_weight_bytes

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        result = PassResult(self.copy(model))
        if self.max_part_bytes is None:
            return result
        graph = result.model.graph
        for vi in list(graph.input):
            if not vi.name.endswith(GRAD_BUFFER_SUFFIX):
                continue
            param = vi.name[: -len(GRAD_BUFFER_SUFFIX)]
            shape = _static_shape(vi)
            if shape is None or len(shape) != 2 or vi.type.tensor_type.elem_type != TensorProto.FLOAT:
                continue
            nbytes = 4 * shape[0] * shape[1]
            if nbytes <= self.max_part_bytes:
                continue
            parts = min(shape[0], math.ceil(nbytes / self.max_part_bytes))
            if parts < 2:
                continue   # a single row cannot be split by rows
            site = _match(graph, param, shape)
            if isinstance(site, str):
                result.skipped.append(Skipped(param, "fully connected weight", site))
                continue
            split = _rewrite(graph, site, parts)
            result.records.append(PassRecord("split_weight", self.name, split.parameter, split.to_dict()))
        if result.records:
            record_splits(result.model, splits_made(result))
            check_model(result.model, "split_weight pass")
        return result


@dataclass(frozen=True)
class _Site:
    """A weight split can handle: its forward input X, output gradient dY and backward nodes (by name)."""

    param: str
    shape: tuple[int, int]
    x: str
    dy: str
    dw: str
    dx: str | None
    acc: str


def _match(graph: onnx.GraphProto, param: str, shape: tuple[int, ...]) -> _Site | str:
    """The weight's site, or why it cannot be split."""
    nodes = list(graph.node)
    consumers = [n for n in nodes if param in n.input]
    fwd = [n for n in consumers if n.op_type == "Gemm" and n.input[1] == param and node_attr(n, "transB", 0) == 1
           and node_attr(n, "transA", 0) == 0 and node_attr(n, "alpha", 1.0) == 1.0]
    dx = [n for n in consumers if n.op_type == "Gemm" and n.input[1] == param and node_attr(n, "transA", 0) == 0
          and node_attr(n, "transB", 0) == 0 and node_attr(n, "alpha", 1.0) == 1.0 and node_attr(n, "beta", 0.0) == 0.0
          and len(n.input) == 2]
    if len(fwd) != 1 or len(dx) > 1 or len(consumers) != len(fwd) + len(dx):
        return "read by something other than one forward Gemm(X, W, transB=1) and its dX Gemm"
    x = fwd[0].input[0]
    bias = fwd[0].input[2] if len(fwd[0].input) > 2 and fwd[0].input[2] else None
    if bias is not None:
        b = next((vi for vi in list(graph.input) + list(graph.value_info) if vi.name == bias), None)
        init = next((t for t in graph.initializer if t.name == bias), None)
        b_shape = _static_shape(b) if b is not None else (tuple(init.dims) if init is not None else None)
        if b_shape != (shape[0],):
            return f"bias {bias} is not a vector of {shape[0]} (broadcast biases are not split)"
    buffer = param + GRAD_BUFFER_SUFFIX
    accs = [n for n in nodes if n.op_type == "InPlaceAccumulatorV2" and n.input[0] == buffer]
    if len(accs) != 1:
        return "its gradient buffer is not read by exactly one InPlaceAccumulatorV2"
    acc = accs[0]
    grad = acc.input[1]
    dw = [n for n in nodes if grad in n.output]
    if len(dw) != 1 or dw[0].op_type != "Gemm" or node_attr(dw[0], "transA", 0) != 1 or node_attr(dw[0], "transB", 0) \
            or len(dw[0].input) != 2 or dw[0].input[1] != x or sum(grad in n.input for n in nodes) != 1:
        return "its gradient is not a lone Gemm(dY, X, transA=1) read only by its accumulator"
    dy = dw[0].input[0]
    if dx and dx[0].input[0] != dy:
        return "its dX Gemm reads another output gradient than its dW Gemm"
    if len(acc.output) != 1 or acc.output[0] != param + GRAD_OUT_SUFFIX:
        return "its accumulator has no single graph output named after the parameter"
    names = [n.name for n in (dw[0], acc, *dx)]
    if not all(names) or any(sum(n.name == name for n in nodes) != 1 for name in names):
        return "its backward nodes have no unique names to find them by"
    return _Site(param, (shape[0], shape[1]), x, dy, dw[0].name, dx[0].name if dx else None, acc.name)


def _rewrite(graph: onnx.GraphProto, site: _Site, parts: int) -> WeightSplit:
    """Replace ``site``'s forward Gemm, dW Gemm, accumulator and dX Gemm by their per-block versions."""
    param, shape, x, dy = site.param, site.shape, site.x, site.dy
    taken = taken_names(graph)
    split = WeightSplit(param, tuple(unique_name(f"{param}{PART_INFIX}{j}", taken) for j in range(parts)),
                        _row_bounds(shape[0], parts), (shape[0], shape[1]))
    for p in split.parts:
        taken.update({p + GRAD_BUFFER_SUFFIX, p + GRAD_OUT_SUFFIX})
    split_forward_gemm(graph, split, taken)
    nodes = list(graph.node)   # protobuf copied the nodes: find the backward ones again, by name
    by_name = {n.name: n for n in nodes}
    dw, acc, dx = [by_name[site.dw]], by_name[site.acc], ([by_name[site.dx]] if site.dx else [])
    grad = acc.input[1]
    # Backward, per block: dY's columns, dX's partial product (added to a running sum at once, so two
    # partials are alive, not p), and dW_j with its accumulator right behind it.
    prefix = _prefix(param)
    slices, dx_chain, grads = (GraphEditor(graph, taken, prefix) for _ in range(3))
    running = None
    for j, part in enumerate(split.parts):
        dy_j = _slice(slices, dy, split.bounds[j], split.bounds[j + 1], 1, f"dy{j}")
        g_j = grads.op("Gemm", [dy_j, x], f"grad{j}", TensorProto.FLOAT, None, transA=1, transB=0, alpha=1.0,
                       beta=0.0)
        grads.nodes.append(helper.make_node("InPlaceAccumulatorV2", [part + GRAD_BUFFER_SUFFIX, g_j, acc.input[2]],
                                            [part + GRAD_OUT_SUFFIX], domain=acc.domain,
                                            name=unique_name(f"{prefix}_accumulate{j}", taken)))
        if dx:
            p_j = dx_chain.op("Gemm", [dy_j, part], f"dx{j}", TensorProto.FLOAT, None, transA=0, transB=0,
                              alpha=1.0, beta=0.0)
            if running is not None:
                if j == len(split.parts) - 1:
                    dx_chain.nodes.append(helper.make_node("Add", [running, p_j], [dx[0].output[0]],
                                                           name=unique_name(f"{prefix}_dx_sum", taken)))
                else:
                    p_j = dx_chain.op("Add", [running, p_j], f"dx_sum{j}", TensorProto.FLOAT, None)
            running = p_j
    # In the old nodes' place: the slices, the dX chain (backward goes on with it), the weight gradients.
    at = next(i for i, n in enumerate(nodes) if n is dw[0] or (dx and n is dx[0]))
    old = {id(dw[0]), id(acc)} | ({id(dx[0])} if dx else set())
    rest = [n for n in nodes if id(n) not in old]
    ordered = rest[:at] + slices.nodes + dx_chain.nodes + grads.nodes + rest[at:]
    del graph.node[:]
    graph.node.extend(ordered)
    _replace_input(graph, split, GRAD_BUFFER_SUFFIX)
    outputs = list(graph.output)
    k = next(i for i, o in enumerate(outputs) if o.name == param + GRAD_OUT_SUFFIX)
    new_outs = []
    for p in split.parts:   # the accumulator's output is its one-element "updated" flag
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(outputs[k])
        vi.name = p + GRAD_OUT_SUFFIX
        new_outs.append(vi)
    del graph.output[:]
    graph.output.extend(outputs[:k] + new_outs + outputs[k + 1:])
    stale = {grad, param + GRAD_OUT_SUFFIX}
    kept = [vi for vi in graph.value_info if vi.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept + slices.infos + dx_chain.infos + grads.infos)
    return split


def split_array(value: np.ndarray, split: WeightSplit) -> dict[str, np.ndarray]:
    """The blocks of a weight, by block name."""
    if tuple(value.shape) != split.shape:
        raise OnnxcompError(f"{split.parameter}: shape {tuple(value.shape)} in the checkpoint, "
                            f"{split.shape} in the training graph")
    return {p: np.ascontiguousarray(value[split.bounds[j]:split.bounds[j + 1]]) for j, p in enumerate(split.parts)}


def merge_arrays(blocks: dict[str, np.ndarray], split: WeightSplit) -> np.ndarray:
    """The original weight from its blocks."""
    missing = [p for p in split.parts if p not in blocks]
    if missing:
        raise OnnxcompError(f"{split.parameter}: block(s) {missing} missing from the parameters")
    return np.concatenate([blocks[p] for p in split.parts], axis=0)
