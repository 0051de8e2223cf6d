"""Pass: an MLP's backward in batch chunks — lossy policies only (weight-gradient sums split).

After the transformer passes (passes/transformer.py) and DPR, the step peak of a small ViT is an MLP's
backward: the recomputed fc1 output X (read by the activation's gradient), dH (= dY·W2) and dX_act
(= act'(X)·dH), each batch·tokens·hidden floats (hidden = 4·dim), alive together, plus the recomputed
activation output for dW2. Every one of those tensors is computed row by row: the products with a weight
(dY·W2, dX_act·W1, the fc1 recompute LN(x)·W1ᵀ), the bias Adds, the activation and its gradient, the
LayerNorm clone over the last axis, and the [B, T, C] ↔ [B·T, C] views of the GEMMs. Only the weight
gradients (dW = Aᵀ·dY, a Gemm with transA over the rows; db = ReduceSum over the batch and token axes) couple
the rows. So the region can run for chunks of the batch one after the other, with only one chunk's wide
tensors alive at a time: the row outputs (dLN, the gradient of the MLP's input) are concatenated, the weight
and bias gradients summed chunk by chunk.

Not exact: the weight gradients are sums over chunks of partial sums (another summation order; float32
rounding differs in the last bits), so the pass is offered to the lossy policies only and its records say
``"exact": false``. Concatenating the chunks' dX_act for full-batch dW GEMMs would be exact but saves
nothing (ORT's Concat holds its inputs and output together: docs/notes/vit4x.md).

Region (found by data flow, shapes and op semantics, never by node names or positions): seeded at each
backward elementwise activation gradient (GeluGrad, FastGeluGrad, ReluGrad, …) whose output is ≥ min_bytes;
"wide" tensors are row tensors of at least half the seed's bytes. Members: every row-separable backward op
that reads or makes a wide tensor, except that nothing is followed past a product with a weight (its output
is the region's edge: dLN), plus producers of the members' narrow row inputs when everything they make is
read only by members (the recompute chain LayerNorm clone → its gated view, a reshaped dY): chunked too
rather than held whole. The batch B is the seed's first dimension; a row tensor has a first dimension that is
a multiple of B (B·T for the GEMMs' 2-D views, cut at the same fraction). Weights, biases and scalars are
read whole. Each member's inputs are classified by its op (``row_roles``); a value that is a row operand for
one member and a whole one for another, an op outside the list, or a sum read inside the region stops it.

Ordering: as in chunk_attention (one emission, ``chunk_attention._emit``): chunk c + 1's slices wait for
chunk c's outputs and running sums; gated views inside the region (the recompute passes' Reshape(x,
shape + zero_after(trigger))) are replaced by views of the chunk's shape, and chunk 0 waits for each of
those gates' shapes instead, so nothing the gates held back runs earlier than before.

Run it after the encoders (its Slices of a stash carry no float gradient, so an encoder that runs later
would refuse that stash); decoded tensors are sliced.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from ..analysis import GraphAnalysis, TensorClass, analysis_of
from .base import OnnxcompPass, PassOutcome, Skipped
from .chunk_attention import AttentionRegion, _broadcast, _emit, dtype_of, shape_lookup, value_shapes
from .chunk_backward.regions import is_trigger
from .editor import const_array, ir_taken_names
from .records import PassRecord

MS_DOMAIN = "com.microsoft"
PATTERN = "MLP backward (batch chunks)"
# Elementwise activation gradients: the seeds (com.microsoft).
_SEEDS = frozenset({"GeluGrad", "FastGeluGrad", "BiasGeluGrad_dX", "BiasFastGeluGrad_dX", "QuickGeluGrad",
                    "ReluGrad", "SigmoidGrad", "TanhGrad", "LeakyReluGrad"})
# Row-separable elementwise ops: each output row from the same row of the inputs (others broadcast).
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Identity", "Cast", "Neg", "Relu", "Sigmoid", "Tanh",
                          "Erf", "Sqrt", "Reciprocal", "Where", "LeakyRelu"})
_MS_ELEMENTWISE = _SEEDS | frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu", "DropoutGrad"})
_NORMS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})
ROW, WHOLE = "row", "whole"


def _attr(node: ir.Node, name: str, default: object) -> object:
    a = node.attributes.get(name)
    return default if a is None else a.value


def _const_ints(v: ir.Value | None) -> list[int] | None:
    """The integer values of a constant (initializer or Constant node), else None."""
    array = const_array(v)
    return None if array is None else [int(x) for x in array.reshape(-1)]


def row_roles(node: ir.Node, shape: Callable[[ir.Value | None], tuple[int, ...] | None],
              batch: int) -> tuple[list[str | None], str] | None:
    """How ``node`` works on rows (the first axis, a multiple of ``batch``): per input ``"row"`` (cut by
    chunk), ``"whole"`` (read whole: a weight, a bias, a scalar, a shape) or None (absent); and whether its
    outputs are rows (``"row"``) or sums over the rows (``"sum"``: each chunk's part added). None: not
    row-separable (or shapes unknown). ``shape``: value → static shape or None."""
    op, domain = node.op_type, node.domain
    outs = [shape(v) for v in node.outputs if v.name]
    if not outs or any(s is None for s in outs):
        return None
    ins = [shape(v) if v is not None else None for v in node.inputs]
    out = outs[0]

    def is_rows(s) -> bool:
        return s is not None and len(s) >= 1 and s[0] % batch == 0 and s[0] >= batch

    def elementwise() -> tuple[list[str | None], str] | None:
        if not all(is_rows(s) and s[0] == out[0] for s in outs):
            return None
        roles: list[str | None] = []
        for v, s in zip(node.inputs, ins):
            if v is None:
                roles.append(None)
            elif s is None:
                return None
            elif len(s) == len(out) and s[0] == out[0]:
                roles.append(ROW)
            elif len(s) < len(out) or s[0] == 1:
                roles.append(WHOLE)
            else:
                return None
        return (roles, ROW) if ROW in roles else None

    if domain in ("", "ai.onnx") and op in _ELEMENTWISE or domain == MS_DOMAIN and op in _MS_ELEMENTWISE:
        return elementwise()
    if op in ("MatMul", "FusedMatMul") and domain == ("" if op == "MatMul" else MS_DOMAIN) or \
            op == "MatMul" and domain == "ai.onnx":
        if len(ins) < 2 or ins[0] is None or ins[1] is None or len(ins[1]) != 2 or len(ins[0]) < 2:
            return None
        if _attr(node, "transBatchA", 0) or _attr(node, "transBatchB", 0):
            return None
        if _attr(node, "transA", 0):
            # Aᵀ·B over 2-D row operands: a sum over the rows (a weight gradient).
            if len(ins[0]) == 2 and is_rows(ins[0]) and not _attr(node, "transB", 0) and ins[1][0] == ins[0][0]:
                return [ROW, ROW], "sum"
            return None
        if is_rows(ins[0]) and is_rows(out) and ins[0][0] == out[0]:
            return [ROW, WHOLE], ROW        # rows times a weight
        return None
    if op == "Gemm" and domain in ("", "ai.onnx"):
        if len(ins) < 2 or ins[0] is None or ins[1] is None:
            return None
        c = [WHOLE] if len(ins) > 2 and node.inputs[2] is not None else []
        if not _attr(node, "transA", 0):
            if is_rows(ins[0]) and ins[0][0] == out[0] and (not c or len(ins[2]) < 2 or ins[2][0] == 1):
                return [ROW, WHOLE, *c], ROW
            return None
        if not _attr(node, "transB", 0) and not c and is_rows(ins[0]) and ins[1][0] == ins[0][0]:
            return [ROW, ROW], "sum"
        return None
    if op == "ReduceSum" and domain in ("", "ai.onnx"):
        axes = _const_ints(node.inputs[1]) if len(node.inputs) > 1 else _attr(node, "axes", None)
        if not is_rows(ins[0]) or not axes or 0 not in [a % len(ins[0]) for a in axes]:
            return None
        return [ROW, WHOLE][:len(node.inputs)], "sum"
    if op in _NORMS and domain in ("", "ai.onnx", MS_DOMAIN):
        axis = _attr(node, "axis", -1)
        if ins[0] is None or not is_rows(ins[0]) or axis % len(ins[0]) == 0:
            return None
        if not all(s[0] == ins[0][0] for s in outs):
            return None
        return [ROW] + [WHOLE if v is not None else None for v in node.inputs[1:]], ROW
    if op == "Reshape" and domain in ("", "ai.onnx"):
        # Row-major: a chunk of samples is a contiguous run of elements, so a view whose first axes are both
        # multiples of the batch maps sample chunks to row chunks. The chunk's view gets its own shape.
        if ins[0] is not None and is_rows(ins[0]) and is_rows(out) and not _attr(node, "allowzero", 0):
            return [ROW, WHOLE], ROW
        return None
    return None


def _infer_rows(nodes: list[ir.Node], shapes: dict[ir.Value, tuple[int, ...]], analysis: GraphAnalysis) -> None:
    """Shapes the analysis and ``value_shapes`` leave open, for the ops a region may hold: com.microsoft's
    elementwise ops (Gelu, GeluGrad: no ONNX shape inference) broadcast their inputs; a Reshape to a constant
    shape resolves its -1 / 0. In node order, so chains resolve."""
    known = shape_lookup(analysis, shapes)
    for n in nodes:
        out = n.outputs[0] if n.outputs else None
        if out is None or not out.name or known(out) is not None:
            continue
        ins = [known(v) for v in n.inputs if v is not None]
        if n.domain == MS_DOMAIN and n.op_type in _MS_ELEMENTWISE and ins and all(s is not None for s in ins):
            dims = _broadcast(ins)
            if dims is not None:
                shapes[out] = dims
        elif n.op_type == "Reshape" and n.domain in ("", "ai.onnx") and ins and ins[0] is not None:
            target = _const_ints(n.inputs[1]) if len(n.inputs) > 1 else None
            if target is None or target.count(-1) > 1:
                continue
            dims = [ins[0][i] if d == 0 else d for i, d in enumerate(target)]
            if -1 in dims:
                rest = int(np.prod([d for d in dims if d != -1]))
                if rest == 0 or int(np.prod(ins[0])) % rest:
                    continue
                dims[dims.index(-1)] = int(np.prod(ins[0])) // rest
            if int(np.prod(dims)) == int(np.prod(ins[0])):
                shapes[out] = tuple(dims)


def _is_product(node: ir.Node) -> bool:
    return node.op_type in ("MatMul", "FusedMatMul", "Gemm")


def find_mlp_regions(model: ir.Model, min_bytes: int = 256 * 1024, skipped: list[Skipped] | None = None
                     ) -> list[tuple[AttentionRegion, dict[ir.Value, int | None], frozenset[ir.Value]]]:
    """The MLP backward regions of ``model``: (region, each outside input's chunk position or None, the
    summed outputs). The region's ``leading`` is ``(batch,)``."""
    analysis = analysis_of(model)
    nodes = list(model.graph)
    index = {n: i for i, n in enumerate(nodes)}
    shapes = value_shapes(analysis, nodes)
    _infer_rows(nodes, shapes, analysis)

    def shape(v: ir.Value | None) -> tuple[int, ...] | None:
        if v is None:
            return None
        if v in shapes:
            return shapes[v]
        t = analysis.tensors.get(v.name)
        return t.shape if t is not None else None

    def nbytes(v: ir.Value) -> int:
        return int(np.prod(shape(v))) * dtype_of(analysis, v).itemsize

    def timing(u: ir.Usage) -> bool:
        return is_trigger(u.node.op_type, [i.name if i is not None else "" for i in u.node.inputs])

    taken: set[ir.Node] = set()
    found = []
    for seed in nodes:
        if seed.op_type not in _SEEDS or seed.domain != MS_DOMAIN or seed in taken or \
                not analysis.boundary.is_backward(index[seed]):
            continue
        out = shape(seed.outputs[0])
        if out is None or len(out) < 2 or nbytes(seed.outputs[0]) < min_bytes:
            continue
        batch = out[0]
        wide_bytes = nbytes(seed.outputs[0]) // 2
        roles: dict[ir.Node, tuple[list[str | None], str]] = {}

        def ok(n: ir.Node | None) -> bool:
            if n is None or n in taken or n not in index or not analysis.boundary.is_backward(index[n]):
                return False
            if n not in roles:
                r = row_roles(n, shape, batch)
                if r is None:
                    return False
                roles[n] = r
            return True

        def wide(v: ir.Value) -> bool:
            return shape(v) is not None and nbytes(v) >= wide_bytes

        if not ok(seed):
            continue
        members, queue = {seed}, deque([seed])

        def add(n: ir.Node) -> None:
            if n not in members and ok(n):
                members.add(n)
                queue.append(n)

        changed = True
        while changed:
            while queue:
                n = queue.popleft()
                ins, kind = roles[n]
                if kind == ROW and not _is_product(n):
                    for v in n.outputs:     # readers of the wide tensors it makes (not past a product)
                        if v.name and wide(v):
                            for u in v.uses():
                                if not timing(u):
                                    add(u.node)
                for v, role in zip(n.inputs, ins):
                    if role == ROW and wide(v):
                        add(v.producer())   # who makes a wide tensor it reads
            # Producers of narrow row inputs whose every output is read by members only (or timing reads).
            changed = False
            for n in list(members):
                for v, role in zip(n.inputs, roles[n][0]):
                    p = v.producer() if role == ROW else None
                    if p is None or p in members or not ok(p) or roles[p][1] != ROW:
                        continue
                    if all(u.node in members or timing(u) for w in p.outputs for u in w.uses()) and \
                            not any(w in model.graph.outputs for w in p.outputs):
                        members.add(p)
                        queue.append(p)
                        changed = True
        name = seed.name or seed.outputs[0].name
        sums = frozenset(v for n in members if roles[n][1] == "sum" for v in n.outputs if v.name)
        # An MLP's backward: a weight gradient (a product summed over the rows) and a product of rows with a
        # weight (dX, dH). Without them the rows are coupled only by reductions, e.g. the BatchNorm statistics
        # of chunk_backward's own chunks (ResNet's ReluGrad → Sub/Mul → ReduceSum): nothing an MLP chunking is for.
        if not any(_is_product(n) and roles[n][1] == "sum" for n in members):
            if skipped is not None:
                skipped.append(Skipped(name, PATTERN, "no weight gradient (a product summed over the rows) in "
                                       "its region"))
            continue
        if not any(_is_product(n) and roles[n][1] == ROW for n in members):
            if skipped is not None:
                skipped.append(Skipped(name, PATTERN, "no product of its rows with a weight in its region"))
            continue
        inside = {v for n in members for v in n.outputs if v.name}
        slice_at: dict[ir.Value, int | None] = {}
        problem = None
        for n in members:
            for v, role in zip(n.inputs, roles[n][0]):
                if v is None:
                    continue
                if v in inside:
                    # A member's rows read whole (a product's weight operand) would be one chunk's rows only.
                    if role != ROW and v not in (n.inputs[1:2] if n.op_type == "Reshape" else ()):
                        problem = f"{v.name!r} is made by rows in the region but read whole by {n.op_type}"
                    continue
                pos = 0 if role == ROW else None
                t = analysis.tensors.get(v.name)
                if pos == 0 and t is not None and t.cls in (TensorClass.PARAMETER, TensorClass.CONSTANT):
                    # First axis a multiple of the batch by coincidence: a weight is never cut by samples.
                    problem = f"{v.name!r} is a parameter or constant, yet an operand cut by rows"
                if slice_at.setdefault(v, pos) != pos:
                    problem = f"{v.name!r} is read by rows and whole"
        if problem:
            if skipped is not None:
                skipped.append(Skipped(name, PATTERN, problem))
            continue
        taken |= members
        ordered = sorted(members, key=index.__getitem__)
        sizes = [nbytes(v) for m in ordered for v in m.outputs if v.name and shape(v) is not None]
        for m in ordered:        # shapes _emit reads, also for values the analysis does not know
            for v in m.outputs:
                if v.name and shape(v) is not None:
                    shapes[v] = tuple(shape(v))
        found.append((AttentionRegion(ordered, (batch,), max(sizes), sum(sizes), shapes), slice_at, sums))
    return found


class ChunkedMlpBackwardPass(OnnxcompPass):
    """Each MLP backward region (fc2's dX product to fc1's, with the recompute chain of the activation's input
    and the weight gradients) in ``chunks`` batch chunks. Not exact: the weight and bias gradients are summed
    over chunks (see the module docstring); lossy policies only. ``min_bytes``: seeds whose output is
    smaller are left alone. ``only_lowering``: keep the chunking only where it lowers the graph's predicted
    step peak (the fixed lossy policies: an MLP whose backward is not at the peak — VGG-16's classifier under
    dpr — would pay its extra weight-gradient partials and rounding for nothing)."""

    name = "chunk_mlp"

    def __init__(self, chunks: int = 4, min_bytes: int = 256 * 1024, only_lowering: bool = False) -> None:
        if chunks < 2:
            raise ValueError(f"chunks={chunks}: at least 2")
        self.chunks, self.min_bytes, self.only_lowering = chunks, min_bytes, bool(only_lowering)

    def call(self, model: ir.Model) -> PassOutcome:
        if not self.only_lowering:
            return self._chunk(model)
        from ..planner.predict import predicted_peak

        trial = self._chunk(model.clone())
        if not trial.modified:
            return PassOutcome(model, False, [], trial.skipped)
        before, after = predicted_peak(model), predicted_peak(trial.model)
        if after < before:
            model.graph = trial.model.graph      # in place, as the other trial-based passes do
            return PassOutcome(model, True, trial.records, trial.skipped)
        refused = [Skipped(rec["region"], PATTERN, f"chunking would not lower the predicted step peak "
                           f"({before / 2**20:.1f} -> {after / 2**20:.1f} MiB)") for rec in trial.records]
        return PassOutcome(model, False, [], trial.skipped + refused)

    def _chunk(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        if not any(n.op_type in _SEEDS and n.domain == MS_DOMAIN for n in graph):
            return outcome
        regions = find_mlp_regions(model, self.min_bytes, outcome.skipped)
        if not regions:
            return outcome
        analysis = analysis_of(model)
        nodes = list(graph)
        backward = {n for i, n in enumerate(nodes) if analysis.boundary.is_backward(i)}
        taken = ir_taken_names(graph)
        for region, slice_at, sums in regions:
            batch = region.leading[0]
            k = min(self.chunks, batch)
            if k < 2:
                outcome.skipped.append(Skipped(region.name, PATTERN, f"batch {batch}: nothing to chunk"))
                continue
            # Gated views inside the region get their chunk's static shape; chunk 0 waits for their gates.
            gates = list(dict.fromkeys(
                n.inputs[1] for n in region.nodes if n.op_type == "Reshape" and n.inputs[1] is not None
                and n.inputs[1].const_value is None and _const_ints(n.inputs[1]) is None))
            summed = sorted(v.name for v in sums)   # (before _emit renames the replaced values)
            read = {v for n in region.nodes for v in n.inputs if v is not None}
            problem = _emit(graph, analysis, region, 0, k, taken, gates, backward, slice_at=slice_at, sums=sums,
                            drop_unread=True)
            if problem:
                outcome.skipped.append(Skipped(region.name, PATTERN, problem))
                continue
            # The Reshapes' shape constants the chunks no longer read (each chunk reads its own shape).
            inputs = set(graph.inputs)
            for v in read:
                if v.name in graph.initializers and v not in inputs and not list(v.uses()):
                    del graph.initializers[v.name]
            outcome.records.append(PassRecord("chunked", self.name, region.name, {
                "region": region.name, "pattern": PATTERN, "nodes": [n.name for n in region.nodes],
                "op_types": [n.op_type for n in region.nodes], "leading_dims": [batch], "axis": 0,
                "chunks": k, "largest_tensor_bytes": region.largest_bytes,
                "internal_bytes": region.internal_bytes, "summed": summed, "exact": False,
                "note": "rows by the same kernels; weight and bias gradients summed over batch chunks "
                        "(another summation order: not bit-identical)"}))
            outcome.modified = True
        return outcome
