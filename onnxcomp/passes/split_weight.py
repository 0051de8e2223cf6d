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
               dX_j = Gemm(dY_j, W_j, C=dX_{j-1}, beta=1)     (dX = dX_{p-1}: a chain through Gemm's C)

dX is chained, not p partial products summed by Adds: each partial then depends on the running sum, so at
most two dX-sized buffers are alive under either execution order. With independent partials ORT's DEFAULT
order (a reverse depth-first walk) ran every partial Gemm before the first Add and held all p of them: VGG-16's
fc1 at 32×32 in 10 MiB blocks, 40 partials of 3.06 MiB, predicted 170.7 MiB under DEFAULT against 61.6 under
PRIORITY_BASED (59.4 MiB chained), which made the budget planner refuse every budget below ~128 MiB there.

Every forward output and every weight-gradient element is the same dot product over the same operands as
before; only dX is summed in p pieces, so it differs from ORT's by rounding. ``bit_identical=True``
makes it bit-identical (``passes/exact_gemm.py`` has the rule and the evidence): MLAS, ORT's CPU SGEMM, adds the
reduction into C in fixed chunks of 128 (``MLAS_SGEMM_STRIDEK``), so with block bounds on that grid and dX
chained as ``Gemm(dY_j, W_j, C=dX_{j-1}, beta=1)`` the split call adds the very same chunk sums in the same
order; the bounds are kept only where every Gemm involved (whole and per block, at every intra-op thread
count up to ``max_threads``) keeps the 128 chunk. The pass changes the artifact set, not just the training graph: the checkpoint
holds the blocks in place of ``W`` and the eval model reads them (``runtime.checkpoint.write_split_artifacts``
writes both); ``runtime.checkpoint.merged_parameters`` gives the user's original names back.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import onnx
import onnx_ir as ir

from ..analysis.shapes import numel
from ..analysis.training_graph import GRAD_BUFFER_SUFFIX, GRAD_OUT_SUFFIX
from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, PassResult, Skipped
from .editor import IrGraphEditor, ir_taken_names, static_shape, unique_name
from .exact_gemm import DEFAULT_MAX_THREADS, exact_row_bounds
from .records import PassRecord

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


def float_grad_buffers(graph: ir.Graph, rank: int) -> Iterator[tuple[ir.Value, str, tuple[int, ...], int]]:
    """Every float32 gradient buffer of ``rank`` with a static shape, as (buffer, parameter, shape, bytes);
    the graph's inputs are read once up front, so a rewrite may add inputs while this runs."""
    for buffer in list(graph.inputs):
        if not buffer.name.endswith(GRAD_BUFFER_SUFFIX):
            continue
        shape = static_shape(buffer)
        if shape is None or len(shape) != rank or buffer.dtype != ir.DataType.FLOAT:
            continue
        yield buffer, buffer.name[: -len(GRAD_BUFFER_SUFFIX)], shape, 4 * numel(shape)


def _row_bounds(rows: int, parts: int) -> tuple[int, ...]:
    """Even row blocks (the first ``rows % parts`` one row longer)."""
    step, extra = divmod(rows, parts)
    bounds = [0]
    for j in range(parts):
        bounds.append(bounds[-1] + step + (1 if j < extra else 0))
    return tuple(bounds)


def _metadata(model: onnx.ModelProto | ir.Model) -> dict[str, str]:
    if isinstance(model, ir.Model):
        return model.metadata_props
    return {p.key: p.value for p in model.metadata_props}


def record_splits(model: onnx.ModelProto | ir.Model, splits: Iterable[WeightSplit]) -> None:
    """Write the splits into ``model``'s metadata (merged with any an earlier transform recorded)."""
    known = splits_of(model)
    known += [s for s in splits if s.parameter not in {k.parameter for k in known}]
    if known:
        value = json.dumps([s.to_dict() for s in known])
        if isinstance(model, ir.Model):
            model.metadata_props[SPLIT_METADATA_KEY] = value
        else:
            onnx.helper.set_model_props(model, _metadata(model) | {SPLIT_METADATA_KEY: value})


def splits_made(result: PassResult | PassOutcome) -> list[WeightSplit]:
    """The splits a SplitWeightPass run made, from its records."""
    return [WeightSplit.from_dict(r.detail) for r in result.records if r.kind == "split_weight"]


def splits_of(model: onnx.ModelProto | ir.Model) -> list[WeightSplit]:
    value = _metadata(model).get(SPLIT_METADATA_KEY)
    return [WeightSplit.from_dict(d) for d in json.loads(value)] if value else []


def _prefix(param: str) -> str:
    return f"onnxcomp_split_{param.replace('/', '_').strip('_')}"


def _slice(editor: IrGraphEditor, tensor: ir.Value, lo: int, hi: int, axis: int, base: str) -> ir.Value:
    start, end, axes = (editor.shared_const(editor.name(f"{base}_{k}"), [v])
                        for k, v in (("start", lo), ("end", hi), ("axis", axis)))
    return editor.op("Slice", [tensor, start, end, axes], base, ir.DataType.FLOAT, None)


def _graph_input(graph: ir.Graph, name: str) -> ir.Value | None:
    return next((v for v in graph.inputs if v.name == name), None)


def _block_inputs(graph: ir.Graph, whole: ir.Value, split: WeightSplit, suffix: str = "") -> list[ir.Value]:
    """Graph input ``whole`` (``parameter+suffix``) → one input per block, in its place. ``whole`` leaves the
    inputs; its readers must be rewritten by the caller."""
    parts = [ir.Value(name=p + suffix, type=ir.TensorType(whole.dtype),
                      shape=ir.Shape([split.bounds[j + 1] - split.bounds[j], *split.shape[1:]]))
             for j, p in enumerate(split.parts)]
    k = graph.inputs.index(whole)
    graph.inputs[k:k + 1] = parts
    return parts


def _is_weight_gemm(node: ir.Node, weight: ir.Value, *, trans_b: int) -> bool:
    """``node`` is ``Gemm(., weight)`` with transA=0, alpha=1 and the given transB."""
    a = node.attributes
    return (node.op_type == "Gemm" and len(node.inputs) > 1 and node.inputs[1] is weight
            and a.get_int("transB", 0) == trans_b and a.get_int("transA", 0) == 0 and a.get_float("alpha", 1.0) == 1.0)


def split_forward_gemm(graph: ir.Graph, split: WeightSplit, taken: set[str] | None = None) -> bool:
    """Replace the forward ``Gemm(X, W, b, transB=1)`` reading ``split.parameter`` by per-block Gemms and a
    Concat (the eval model's whole rewrite; the training graph's forward half), the graph input ``W`` by its
    blocks. False if there is none."""
    weight = _graph_input(graph, split.parameter)
    gemm = next((u.node for u in (weight.uses() if weight is not None else ()) if u.idx == 1
                 and u.node.op_type == "Gemm" and u.node.attributes.get_int("transB", 0) == 1), None)
    if gemm is None:
        return False
    editor = IrGraphEditor(graph, taken if taken is not None else ir_taken_names(graph), _prefix(split.parameter))
    parts = _block_inputs(graph, weight, split)
    x, bias = gemm.inputs[0], (gemm.inputs[2] if len(gemm.inputs) > 2 else None)
    keep = {name: attr.value for name, attr in sorted(gemm.attributes.items())}   # helper.make_node's order
    outs = []
    for j, part in enumerate(parts):
        inputs = [x, part]
        if bias is not None:
            inputs.append(_slice(editor, bias, split.bounds[j], split.bounds[j + 1], 0, f"bias{j}"))
        outs.append(editor.op("Gemm", inputs, f"y{j}", ir.DataType.FLOAT, None, **keep))
    y = gemm.outputs[0]
    concat = editor.node("Concat", outs, [(y.name, ir.DataType.FLOAT, None)], axis=1,
                         name=unique_name(f"{editor.prefix}_concat", editor.taken))
    _take_over(y, concat.outputs[0])
    graph.insert_before(gemm, editor.nodes)
    graph.remove(gemm, safe=True)
    return True


def _take_over(old: ir.Value, new: ir.Value) -> None:
    """``new`` (named as ``old``) replaces ``old`` everywhere, graph outputs included, with its declared type."""
    new.type, new.shape = old.type, old.shape
    old.replace_all_uses_with(new, replace_graph_outputs=True)


class SplitWeightPass(OnnxcompPass):
    """split_weight_bytes: largest weight block kept in one piece (None: the pass does nothing, the default —
    the split renames the user's parameter, so it is asked for, never implied). bit_identical: bit-identical training
    (bounds on MLAS's reduction grid, which the dX chain of Gemms then sums as the whole Gemm does; a weight
    with no such bounds is left whole, and blocks may stay larger than asked) for any intra-op thread count up
    to max_threads."""

    name = "split_weight"

    def __init__(self, split_weight_bytes: int | None = None, bit_identical: bool = False,
                 max_threads: int = DEFAULT_MAX_THREADS) -> None:
        if split_weight_bytes is not None and split_weight_bytes <= 0:
            raise OnnxcompError(f"split_weight_bytes must be > 0 (got {split_weight_bytes})")
        self.max_part_bytes = split_weight_bytes
        self.bit_identical = bit_identical
        self.max_threads = max_threads

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        if self.max_part_bytes is None:
            return outcome
        graph = model.graph
        for buffer, param, shape, nbytes in float_grad_buffers(graph, 2):
            if nbytes <= self.max_part_bytes:
                continue
            parts = min(shape[0], math.ceil(nbytes / self.max_part_bytes))
            if parts < 2:
                continue   # a single row cannot be split by rows
            site = _match(graph, param, (shape[0], shape[1]), buffer)
            if isinstance(site, str):
                outcome.skipped.append(Skipped(param, "fully connected weight", site))
                continue
            bounds = _row_bounds(shape[0], parts)
            if self.bit_identical:
                batch = static_shape(site.x)
                found = exact_row_bounds(shape[0], shape[1], batch[0] if batch and len(batch) == 2 else None,
                                         parts, self.max_threads)
                if isinstance(found, str):
                    outcome.skipped.append(Skipped(param, "fully connected weight", found))
                    continue
                bounds = found
            split = _rewrite(graph, site, bounds)
            outcome.records.append(PassRecord("split_weight", self.name, split.parameter, split.to_dict()))
        if outcome.records:
            record_splits(model, splits_made(outcome))
            outcome.modified = True
        return outcome


@dataclass(frozen=True)
class _Site:
    """A weight split can handle: its forward input X, output gradient dY and backward nodes."""

    param: str
    shape: tuple[int, int]
    x: ir.Value
    dy: ir.Value
    dw: ir.Node
    dx: ir.Node | None
    acc: ir.Node


def _match(graph: ir.Graph, param: str, shape: tuple[int, int], buffer: ir.Value) -> _Site | str:
    """The weight's site, or why it cannot be split."""
    weight = _graph_input(graph, param)
    consumers = list(dict.fromkeys(u.node for u in weight.uses())) if weight is not None else []
    fwd = [n for n in consumers if _is_weight_gemm(n, weight, trans_b=1)]
    dx = [n for n in consumers if _is_weight_gemm(n, weight, trans_b=0)
          and n.attributes.get_float("beta", 0.0) == 0.0 and len(n.inputs) == 2]
    if len(fwd) != 1 or len(dx) > 1 or len(consumers) != len(fwd) + len(dx):
        return "read by something other than one forward Gemm(X, W, transB=1) and its dX Gemm"
    x = fwd[0].inputs[0]
    bias = fwd[0].inputs[2] if len(fwd[0].inputs) > 2 else None
    if bias is not None and static_shape(bias) != (shape[0],):
        return f"bias {bias.name} is not a vector of {shape[0]} (broadcast biases are not split)"
    accs = [u.node for u in buffer.uses() if u.node.op_type == "InPlaceAccumulatorV2" and u.idx == 0]
    if len(accs) != 1:
        return "its gradient buffer is not read by exactly one InPlaceAccumulatorV2"
    acc = accs[0]
    grad = acc.inputs[1]
    dw = grad.producer() if grad is not None else None
    if dw is None or dw.op_type != "Gemm" or dw.attributes.get_int("transA", 0) != 1 \
            or dw.attributes.get_int("transB", 0) or len(dw.inputs) != 2 or dw.inputs[1] is not x \
            or len(grad.uses()) != 1:
        return "its gradient is not a lone Gemm(dY, X, transA=1) read only by its accumulator"
    dy = dw.inputs[0]
    if dx and dx[0].inputs[0] is not dy:
        return "its dX Gemm reads another output gradient than its dW Gemm"
    if len(acc.outputs) != 1 or acc.outputs[0].name != param + GRAD_OUT_SUFFIX:
        return "its accumulator has no single graph output named after the parameter"
    return _Site(param, shape, x, dy, dw, dx[0] if dx else None, acc)


def _rewrite(graph: ir.Graph, site: _Site, bounds: tuple[int, ...]) -> WeightSplit:
    """Replace ``site``'s forward Gemm, dW Gemm, accumulator and dX Gemm by their per-block versions; dX as
    dX_j = Gemm(dY_j, W_j, dX_{j-1}, beta=1) (MLAS's own accumulation order, and one partial at a time under
    either execution order: see the module docstring)."""
    param, shape, x, dy, acc = site.param, site.shape, site.x, site.dy, site.acc
    taken = ir_taken_names(graph)
    parts = len(bounds) - 1
    split = WeightSplit(param, tuple(unique_name(f"{param}{PART_INFIX}{j}", taken) for j in range(parts)),
                        bounds, (shape[0], shape[1]))
    for p in split.parts:
        taken.update({p + GRAD_BUFFER_SUFFIX, p + GRAD_OUT_SUFFIX})
    split_forward_gemm(graph, split, taken)
    weights = [_graph_input(graph, p) for p in split.parts]
    buffers = _block_inputs(graph, acc.inputs[0], split, GRAD_BUFFER_SUFFIX)
    flag = acc.outputs[0]
    # Backward, per block: dY's columns, dX's running sum through Gemm's C, and dW_j with its accumulator
    # right behind it.
    prefix = _prefix(param)
    slices, dx_chain, grads = (IrGraphEditor(graph, taken, prefix) for _ in range(3))
    flags, running = [], None
    for j, (weight, buffer) in enumerate(zip(weights, buffers)):
        dy_j = _slice(slices, dy, split.bounds[j], split.bounds[j + 1], 1, f"dy{j}")
        g_j = grads.op("Gemm", [dy_j, x], f"grad{j}", ir.DataType.FLOAT, None, alpha=1.0, beta=0.0, transA=1,
                       transB=0)
        flags.append(grads.node("InPlaceAccumulatorV2", [buffer, g_j, acc.inputs[2]],
                                [(split.parts[j] + GRAD_OUT_SUFFIX, flag.dtype, None)], domain=acc.domain,
                                name=unique_name(f"{prefix}_accumulate{j}", taken)).outputs[0])
        flags[-1].shape = flag.shape     # the accumulator's output is its one-element "updated" flag
        if site.dx is not None:
            last = j == len(split.parts) - 1
            inputs, beta = ([dy_j, weight], 0.0) if running is None else ([dy_j, weight, running], 1.0)
            total = site.dx.outputs[0]
            name = total.name if last else unique_name(f"{prefix}_dx{j}", taken)
            running = dx_chain.node("Gemm", inputs, [(name, ir.DataType.FLOAT, None)], alpha=1.0, beta=beta,
                                    transA=0, transB=0, name=unique_name(f"{prefix}_dx_gemm{j}", taken)).outputs[0]
            if last:
                _take_over(total, running)
    # In the old nodes' place: the slices, the dX chain (backward goes on with it), the weight gradients.
    first = next(n for n in graph if n is site.dw or n is site.dx)
    graph.insert_before(first, slices.nodes + dx_chain.nodes + grads.nodes)
    k = graph.outputs.index(flag)
    graph.outputs[k:k + 1] = flags
    graph.remove([site.dw, acc] + ([site.dx] if site.dx is not None else []), safe=True)
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
