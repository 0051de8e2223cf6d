"""Pass: attention's backward in head (or batch) chunks — exact, bit-identical.

After the exact transformer passes (passes/transformer.py) the step peak of a transformer is attention's
*backward transients*: dP (= dO·Vᵀ), the rebuilt P and P_drop, DropoutGrad's and SoftmaxGrad's outputs,
each batch·heads·T² floats, several alive at once. No stash encoding touches them. But every one of those
ops works on one (batch, head) slice at a time: batched MatMul / FusedMatMul multiply slice by slice,
Softmax / SoftmaxGrad reduce over the last axis, DropoutGrad / Where / Mul are elementwise, and the products
that leave the block (dQ = dS·K, dKᵀ = Qᵀ·dS, dV = P_dropᵀ·dO) are per slice too (their sums run over T,
never over batch or heads). So the block can run for chunks of a leading axis one after the other, with only
one chunk's T² tensors alive at a time; its outputs (dQ, dK, dV: batch·heads·T·d, small) are concatenated.

Same kernels on the same slices, and no sum is split: the gradients are **bit-identical** (the tests compare
them exactly), unlike the batch-chunked CNN regions of chunk_backward, whose weight gradients are summed
chunk by chunk. Query-row chunks would split dK's and dV's sums over the queries: not done.

Region (found by data flow and shapes, never by node names): starting at each backward ``SoftmaxGrad`` over
the last axis of a rank ≥ 3 tensor, the connected backward ops whose outputs all have the same leading
dimensions L (everything but the last two axes) and that are separable over them (SEPARABLE below, with
their attribute checks): on ORT's exports that is the FusedMatMul of dP, DropoutGrad, SoftmaxGrad, the
Where/Mul of the mask and scale, the three products, and the recompute clones of P (MatMul → Mul → Where →
Softmax → DropoutGrad). It stops at the Transposes / Reshapes around the heads. The region's inputs are
sliced along the chunk axis (or read whole where they broadcast over it: the causal mask, scalars, weights).

Ordering: chunk c + 1's slices start at an offset that adds ``zero_after`` of chunk c's outputs, so under
both ORT execution orders the chunks run one after the other. One-element timing reads of a value inside
the region (another pass's gate trigger, e.g. the mask decoder's) read the region's incoming gradient
instead, so what they time runs before chunk 0 rather than amid its T² tensors (any element times the same).

Run it after the encoders: its Slices of a stash carry no float gradient, so an encoder that runs later
would refuse that stash (see docs/chunking.md, "Where it runs in a policy"); decoded tensors are sliced.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ..analysis import GraphAnalysis, analysis_of
from .base import OnnxcompPass, PassOutcome, Skipped, even_bounds
from .chunk_backward.regions import is_trigger
from .editor import IrGraphEditor, const_array, ir_taken_names, stable_toposort, unique_name
from .records import PassRecord

MS_DOMAIN = "com.microsoft"
PREFIX = "onnxcomp_attnchunk"
PATTERN = "attention backward (head/batch chunks)"
_ELEMENTWISE = frozenset({"Mul", "Add", "Sub", "Div", "Where", "Identity", "Cast", "Neg"})
_SOFTMAX = frozenset({"Softmax", "SoftmaxGrad", "SoftmaxGrad_13"})
_SEEDS = frozenset({"SoftmaxGrad", "SoftmaxGrad_13"})


def _attr(node: ir.Node, name: str, default: object) -> object:
    a = node.attributes.get(name)
    return default if a is None else a.value


def separable(node: ir.Node, rank: int, dropout: bool = False) -> bool:
    """``node`` computes each slice of the leading axes of a rank-``rank`` output from the same slice of its
    inputs (inputs of lower rank, or of dimension 1 there, broadcast). ``dropout``: a Dropout counts too
    (elementwise, but a Dropout per chunk draws other random numbers: not exact)."""
    op, domain = node.op_type, node.domain
    if domain in ("", "ai.onnx"):
        if op in _ELEMENTWISE or op == "MatMul":
            return True
        if op == "Softmax":   # opset ≥ 13 semantics (the last axis alone); the graph's opset is checked by the pass
            return _attr(node, "axis", -1) in (-1, rank - 1)
        return dropout and op == "Dropout"
    if domain != MS_DOMAIN:
        return False
    if op == "DropoutGrad":
        return True
    if op in _SOFTMAX:
        return _attr(node, "axis", -1) in (-1, rank - 1)
    if op == "FusedMatMul":   # transA/transB swap the last two axes only; transBatch* would move leading ones
        return not _attr(node, "transBatchA", 0) and not _attr(node, "transBatchB", 0)
    return False


@dataclass
class AttentionRegion:
    """One attention block's backward: its nodes (graph order), the leading dimensions they share, and the
    bytes of the largest tensor inside it (one T² map)."""
    nodes: list[ir.Node]
    leading: tuple[int, ...]
    largest_bytes: int
    internal_bytes: int
    shapes: dict[ir.Value, tuple[int, ...]]

    @property
    def name(self) -> str:
        return f"{self.nodes[0].name}..{self.nodes[-1].name}"


class ChunkedAttentionBackwardPass(OnnxcompPass):
    """Each attention block's backward in ``chunks`` chunks of its largest leading axis (batch or heads).

    Exact (bit-identical): see the module docstring. ``min_bytes``: regions whose largest tensor is smaller
    are left alone."""

    name = "chunk_attention"

    def __init__(self, chunks: int = 8, min_bytes: int = 64 * 1024) -> None:
        if chunks < 2:
            raise ValueError(f"chunks={chunks}: at least 2")
        self.chunks, self.min_bytes = chunks, min_bytes

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
        graph = model.graph
        nodes = list(graph)
        if opset < 13 or not any(n.op_type in _SEEDS and n.domain == MS_DOMAIN for n in nodes):
            return outcome
        analysis = analysis_of(model)
        regions = find_attention_regions(analysis, nodes, outcome.skipped)
        backward = {n for i, n in enumerate(nodes) if analysis.boundary.is_backward(i)}
        taken = ir_taken_names(graph)
        for region in regions:
            if region.largest_bytes < self.min_bytes:
                outcome.skipped.append(Skipped(region.name, PATTERN, f"largest tensor {region.largest_bytes} B "
                                               f"(< min_bytes {self.min_bytes})"))
                continue
            axis = max(range(len(region.leading)), key=lambda i: (region.leading[i], i))
            k = min(self.chunks, region.leading[axis])
            if k < 2:
                outcome.skipped.append(Skipped(region.name, PATTERN, f"leading dimensions {region.leading}: "
                                               "nothing to chunk"))
                continue
            problem = _emit(graph, analysis, region, axis, k, taken, backward=backward)
            if problem:
                outcome.skipped.append(Skipped(region.name, PATTERN, problem))
                continue
            outcome.records.append(PassRecord("chunked", self.name, region.name, {
                "region": region.name, "pattern": PATTERN, "nodes": [n.name for n in region.nodes],
                "op_types": [n.op_type for n in region.nodes], "leading_dims": list(region.leading),
                "axis": axis, "chunks": k, "largest_tensor_bytes": region.largest_bytes,
                "internal_bytes": region.internal_bytes, "exact": True,
                "note": "each (batch, head) slice by the same kernels, no sum split: bit-identical"}))
            outcome.modified = True
        return outcome


def find_attention_regions(analysis: GraphAnalysis, nodes: list[ir.Node],
                           skipped: list[Skipped] | None = None) -> list[AttentionRegion]:
    """The attention backward regions of the graph (``nodes``: the onnx-ir nodes in the analysis' order)."""
    index = {n: i for i, n in enumerate(nodes)}
    backward = analysis.boundary
    shapes = value_shapes(analysis, nodes)
    taken: set[ir.Node] = set()
    regions = []

    def shape(v: ir.Value | None) -> tuple[int, ...] | None:
        if v is None:
            return None
        t = analysis.tensors.get(v.name)
        return shapes.get(v) or (t.shape if t is not None else None)

    def fits(n: ir.Node, leading: tuple[int, ...]) -> bool:
        if n in taken or n not in index or not backward.is_backward(index[n]):
            return False
        outs = [shape(v) for v in n.outputs if v.name]
        return bool(outs) and all(s is not None and len(s) == len(leading) + 2 and s[:-2] == leading for s in outs) \
            and separable(n, len(leading) + 2)

    for seed in nodes:
        if seed.op_type not in _SEEDS or seed.domain != MS_DOMAIN or seed in taken or seed.name.startswith(PREFIX):
            continue    # (a chunk of an earlier run is not chunked again)
        out = shape(seed.outputs[0])
        if out is None or len(out) < 3:
            continue
        leading = out[:-2]
        if not fits(seed, leading):
            if skipped is not None:
                skipped.append(Skipped(seed.name, PATTERN, "softmax gradient not over the last axis"))
            continue
        members, queue = {seed}, deque([seed])
        while queue:
            n = queue.popleft()
            # Producers and readers of its values, and the other readers of its per-slice inputs (dV's
            # product reads the same dO as dP's, but nothing of the region when P_drop is a forward stash).
            per_slice = [v for v in n.inputs if v is not None and (s := shape(v)) is not None and s[:-2] == leading]
            near = [v.producer() for v in n.inputs if v is not None] + \
                   [u.node for v in [*n.outputs, *per_slice] for u in v.uses()]
            for m in near:
                if m is not None and m not in members and fits(m, leading):
                    members.add(m)
                    queue.append(m)
        if not any(m.op_type in ("MatMul", "FusedMatMul") for m in members):
            continue
        taken |= members
        ordered = sorted(members, key=index.__getitem__)
        sizes = [int(np.prod(shapes[v])) * dtype_of(analysis, v).itemsize for m in ordered for v in m.outputs
                 if v.name]
        regions.append(AttentionRegion(ordered, leading, max(sizes), sum(sizes), shapes))
    return regions


def dtype_of(analysis: GraphAnalysis, v: ir.Value) -> np.dtype:
    """The element type of ``v``: the graph's or the analysis' word, else (the separable ops keep their
    first data input's type; Cast says its own) that input's."""
    if v.dtype is not None:
        return np.dtype(v.dtype.numpy())
    t = analysis.tensors.get(v.name)
    if t is not None and t.shape is not None:
        return t.type.dtype
    node = v.producer()
    if node is not None and node.op_type == "Cast":
        return np.dtype(ir.DataType(_attr(node, "to", 1)).numpy())
    first = 1 if node is not None and node.op_type == "Where" else 0     # Where(condition, x, y)
    if node is not None and len(node.inputs) > first and node.inputs[first] is not None:
        return dtype_of(analysis, node.inputs[first])
    return np.dtype(np.float32)


def shape_lookup(analysis: GraphAnalysis, shapes: dict[ir.Value, tuple[int, ...]]
                 ) -> Callable[[ir.Value | None], tuple[int, ...] | None]:
    """A value's static shape: from ``shapes`` (inferred here) first, else the analysis', else None."""
    def known(v: ir.Value | None) -> tuple[int, ...] | None:
        if v is None:
            return None
        if v in shapes:
            return shapes[v]
        t = analysis.tensors.get(v.name) if v.name else None
        return t.shape if t is not None else None
    return known


def value_shapes(analysis: GraphAnalysis, nodes: list[ir.Node]) -> dict[ir.Value, tuple[int, ...]]:
    """Static shapes of the graph's values: the analysis' where it knows them, else inferred here for the
    separable ops (ORT's FusedMatMul, DropoutGrad, SoftmaxGrad have no ONNX shape inference)."""
    out: dict[ir.Value, tuple[int, ...]] = {}
    known = shape_lookup(analysis, out)
    for n in nodes:
        for v in n.outputs:
            s = known(v)
            if s is None and v is n.outputs[0]:
                s = _infer(n, [known(i) for i in n.inputs])
            if s is not None:
                out[v] = tuple(s)
    return out


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max(len(s) for s in shapes)
    dims = []
    for k in range(rank):
        ds = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0} - {1}
        if len(ds) > 1:
            return None
        dims.append(ds.pop() if ds else 1)
    return tuple(dims)


def _infer(node: ir.Node, ins: list[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    op = node.op_type
    if op in ("Softmax", "SoftmaxGrad", "SoftmaxGrad_13", "DropoutGrad", "Identity", "Cast", "Neg"):
        return ins[0]
    if any(s is None for s in ins if s is not ...):
        return None
    if op in _ELEMENTWISE:
        return _broadcast([s for s in ins if s is not None])
    if op in ("MatMul", "FusedMatMul") and len(ins) >= 2 and len(ins[0]) >= 2 and len(ins[1]) >= 2:
        a, b = list(ins[0]), list(ins[1])
        if op == "FusedMatMul" and (_attr(node, "transBatchA", 0) or _attr(node, "transBatchB", 0)):
            return None
        if op == "FusedMatMul" and _attr(node, "transA", 0):
            a[-2:] = a[-1], a[-2]
        if op == "FusedMatMul" and _attr(node, "transB", 0):
            b[-2:] = b[-1], b[-2]
        lead = _broadcast([tuple(a[:-2]), tuple(b[:-2])])
        return None if lead is None or a[-1] != b[-2] else (*lead, a[-2], b[-1])
    return None


def _leaves_and_returns(members: set[ir.Node], outputs: list[ir.Value]) -> bool:
    """Whether a node outside ``members`` that depends on the region's ``outputs`` (the concatenated ones;
    timing reads are rewired) feeds the region again: the region is then not convex, and chunks that each
    wait for the one before would form a cycle."""
    frontier = [use.node for v in outputs for use in v.uses() if use.node not in members]
    seen: set[ir.Node] = set()
    while frontier:
        node = frontier.pop()
        if node in seen:
            continue
        seen.add(node)
        for v in node.outputs:
            for use in v.uses():
                if use.node in members:
                    return True
                frontier.append(use.node)
    return False


def _emit(graph: ir.Graph, analysis: GraphAnalysis, region: AttentionRegion, axis: int, k: int,
          taken: set[str], first_after: list[ir.Value] = (), backward: set[ir.Node] = frozenset(), *,
          slice_at: dict[ir.Value, int | None] | None = None, sums: frozenset[ir.Value] = frozenset(),
          drop_unread: bool = False) -> str | None:
    """Rewrite ``region`` in ``k`` chunks along leading axis ``axis``; returns why not, or None when done.
    ``first_after``: values chunk 0 waits for too (an encoder's anchor, so it runs first).

    The batch-chunked MLP backward (passes/chunk_mlp.py) uses the same emission with three additions:
    ``slice_at`` (each outside input's chunk position, or None to read it whole) where the positions are not
    the attention's rank-aligned ones; a chunked tensor whose chunk axis is a multiple of ``extent`` (the
    [batch·tokens, C] views of an MLP's GEMMs) is cut at the same fraction; ``sums``: outputs of nodes that
    sum over the chunk axis (weight-gradient GEMMs, bias ReduceSums), added chunk by chunk instead of
    concatenated; Reshape members read a shape of their chunk; ``drop_unread``: outputs after the first that
    nothing reads (a recomputed LayerNormalization's mean and inverse deviation) are left out of the copies."""
    members = set(region.nodes)
    rank = len(region.leading) + 2
    extent = region.leading[axis]
    inside = {v for n in region.nodes for v in n.outputs if v.name}

    def shape(v: ir.Value) -> tuple[int, ...] | None:
        if v in region.shapes:
            return region.shapes[v]
        t = analysis.tensors.get(v.name)
        return t.shape if t is not None else None

    def elem(v: ir.Value) -> ir.DataType:
        return ir.DataType.from_numpy(dtype_of(analysis, v))

    # Inputs: sliced at their own position of the chunk axis, or read whole where they broadcast over it.
    given = slice_at
    slice_at = {}
    for n in region.nodes:
        for v in n.inputs:
            if v is None or v in inside or v in slice_at:
                continue
            if given is not None:
                if v not in given:
                    return f"input {v.name!r}: no chunk position given"
                pos = given[v]
                if pos is not None and ((dims := shape(v)) is None or dims[pos] % extent):
                    return f"input {v.name!r}: axis {pos} is not a multiple of {extent}"
                slice_at[v] = pos
                continue
            dims = shape(v)
            if dims is None:
                return f"input {v.name!r} has no known shape"
            pos = axis - (rank - len(dims))
            if pos < 0 or dims[pos] == 1:
                slice_at[v] = None
            elif dims[pos] == extent:
                slice_at[v] = pos
            else:
                return f"input {v.name!r} of shape {dims} neither matches nor broadcasts over axis {axis}"
    # Outputs read outside: concatenated, unless every outside read is a one-element timing read.
    concat: list[ir.Value] = []
    triggers: list[tuple[ir.Node, int, ir.Value]] = []
    graph_outputs = set(graph.outputs)
    for v in sorted(inside, key=lambda v: region.nodes.index(v.producer())):
        outside = [u for u in v.uses() if u.node not in members]
        timing = [u for u in outside if is_trigger(u.node.op_type, [i.name if i is not None else ""
                                                                      for i in u.node.inputs])]
        if v in sums:
            if len(outside) < len(list(v.uses())):
                return f"the chunk sum {v.name!r} is read inside the region"
            continue
        if v in graph_outputs or len(timing) < len(outside):
            concat.append(v)
        else:
            triggers += [(u.node, u.idx, v) for u in timing]
    summed = [v for v in sorted(sums, key=lambda v: region.nodes.index(v.producer()))
              if list(v.uses()) or v in graph_outputs]
    if not concat and not summed:
        return "nothing inside it is read after it"
    if _leaves_and_returns(members, concat + summed):
        return ("an output of the region comes back into it through other nodes (e.g. a decoded stash a "
                "recompute gate reads): chunks would form a cycle")

    editor = IrGraphEditor(graph, taken, PREFIX)
    bounds = even_bounds(extent, k)
    copies: list[dict[ir.Value, ir.Value]] = []
    zero: ir.Value | None = None
    for v in first_after:
        z = editor.zero_after(v, ir.DataType.from_numpy(dtype_of(analysis, v)), base=editor.name("c0_after"))
        zero = z if zero is None else editor.op("Add", [zero, z], "c0_after_sum", ir.DataType.INT64, [1])
    running: dict[ir.Value, ir.Value] = {}
    for c in range(k):
        a, b = bounds[c], bounds[c + 1]
        here: dict[ir.Value, ir.Value] = {}
        starts: dict[int, ir.Value] = {}

        def start_at(f: int) -> ir.Value:
            """Chunk c's first index on an axis of ``f`` × extent (attention: f = 1)."""
            if f not in starts:
                s = editor.shared_const(f"{PREFIX}_i64_{a * f}", [a * f])
                if zero is not None:    # chunk c waits for chunk c - 1's outputs (either execution order)
                    s = editor.op("Add", [s, zero], f"c{c}_start", ir.DataType.INT64, [1])
                starts[f] = s
            return starts[f]

        for v, pos in slice_at.items():
            if pos is None:
                here[v] = v
                continue
            dims = list(shape(v))
            f = dims[pos] // extent
            dims[pos] = (b - a) * f
            ax = editor.shared_const(f"{PREFIX}_i64_{pos}", [pos])
            end = editor.shared_const(f"{PREFIX}_i64_{b * f}", [b * f])
            here[v] = editor.op("Slice", [v, start_at(f), end, ax], f"c{c}_{_short(v.name)}",
                                elem(v), dims)
        for n in region.nodes:
            outs = []
            for i, v in enumerate(n.outputs):
                if not v.name or (drop_unread and i > 0 and not list(v.uses())):
                    outs.append(None)
                    continue
                dims = list(shape(v))
                if v not in sums:
                    dims[axis] = dims[axis] // extent * (b - a)
                outs.append((editor.name(f"c{c}_{_short(v.name)}"), elem(v), dims))
            ins = [here[v] if v is not None else None for v in n.inputs]
            if n.op_type == "Reshape" and n.domain in ("", "ai.onnx") and outs[0] is not None:
                ins[1] = editor.shared_const(f"onnxcomp_shape_{'x'.join(map(str, outs[0][2]))}", outs[0][2])
            # A Gemm's sum (Aᵀ·B over the rows, no C) adds the running sum itself: C = the sum so far, beta 1.
            # ORT's CPU Gemm may write Y over C (MayInplace(2, 0)), so one buffer carries the sum through the
            # chunks instead of a part and a sum per chunk.
            accumulate = c > 0 and n.outputs[0] in sums and n.op_type == "Gemm" and len(ins) == 2
            if accumulate:
                ins.append(running[n.outputs[0]])
            copy = editor.clone(n, ins, outs, name=editor.name(f"c{c}_{_short(n.name)}"))
            if accumulate:
                copy.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
            for v, w in zip(n.outputs, copy.outputs):
                if v.name and w.name:
                    here[v] = w
        for v in summed:   # the chunks' partial sums added as they come (one running sum alive, not k parts)
            carried = c > 0 and v.producer().op_type == "Gemm" and len(v.producer().inputs) == 2
            running[v] = here[v] if c == 0 or carried else editor.op(
                "Add", [running[v], here[v]], f"c{c}_sum_{_short(v.name)}", elem(v), list(shape(v)))
        copies.append(here)
        if c + 1 < k:
            zero = editor.zero_after_all([here[v] for v in concat] + [running[v] for v in summed],
                                         base=editor.name(f"c{c}_done"))
    # The region's outputs: each concatenated under its own name (later passes and reports know them by it).
    for v in concat:
        name, dims, kind = v.name, list(shape(v)), elem(v)
        v.name = editor.name(f"replaced_{_short(name)}")
        editor.taken.discard(name)
        whole = editor.op("Concat", [cp[v] for cp in copies], "", kind, dims,
                          out=name, axis=axis)
        v.replace_all_uses_with(whole, replace_graph_outputs=True)
    for v in summed:   # the last running sum takes the original's name
        name, total = v.name, running[v]
        v.name = editor.name(f"replaced_{_short(name)}")
        editor.taken.discard(name)
        editor.taken.discard(total.name)
        total.name = unique_name(name, editor.taken)
        v.replace_all_uses_with(total, replace_graph_outputs=True)
    # Timing reads of a value inside: the latest backward input of the region of the same type (the incoming
    # gradient), so what they time (a mask decoder) runs before chunk 0, not amid its T² tensors; else chunk
    # 0's copy of the value.
    order_of = {n: i for i, n in enumerate(graph)}
    for reader, idx, v in triggers:
        # Made before the reader (in the sorted list): never the reader's own output, e.g. a decoded stash
        # the region reads whose decoder is timed by a value inside the region (a cycle otherwise).
        before = order_of.get(reader, len(order_of))
        same = [u for u in slice_at if u.producer() in backward and u.producer() in order_of
                and order_of[u.producer()] < before and dtype_of(analysis, u) == dtype_of(analysis, v)]
        latest = max(same, key=lambda u: order_of[u.producer()], default=None)
        reader.replace_input_with(idx, latest if latest is not None else copies[0][v])
    # Splice: the new nodes where the region began, the region gone, then a stable topological sort (chunk
    # nodes reading a value made later in the list move down behind it).
    order = list(graph)
    at = order.index(region.nodes[0])
    order = [n for n in order[:at] if n not in members] + editor.nodes + [n for n in order[at:] if n not in members]
    order = stable_toposort(order, "chunk_attention")
    for n in region.nodes:
        for i in range(len(n.inputs)):
            n.replace_input_with(i, None)
    graph.remove([n for n in graph])   # not "safe": kept nodes keep their inputs, only the order changes
    graph.extend(order)
    return None


def _short(name: str) -> str:
    return name.replace("/", "_").strip("_")[-60:]


# ------------------------------------------------------------------------------------------ forward

FORWARD_PATTERN = "attention forward (head/batch chunks)"


class ChunkedAttentionForwardPass(OnnxcompPass):
    """Each attention block's forward, from Q·Kᵀ to the product with V, in ``chunks`` chunks of its largest
    leading axis — exact, bit-identical.

    The forward's T² tensors (scores, scaled, masked, softmax, dropped out) are otherwise alive two or three
    at a time (at batch 1, T 2048, 4 heads: 64 MiB each). Everything up to the softmax is separable per
    slice; the dropout is not chunked as such (a Dropout per chunk would draw other random numbers), but
    its keep-mask does not depend on its input's values or type: ORT draws the mask from its generator
    alone. So the original Dropout keeps its place (the same draw, in the same order) on a zero tensor of the
    same shape (``ConstantOfShape``, its shape gated on Q so ORT cannot fold it into a resident
    initializer), and each chunk applies the mask as the Dropout kernel does, ``P / (1 - ratio) · Cast(mask)``
    (bit-identical to ORT's ``mask · P / (1 - ratio)``; ``mask · P · (1/(1 - ratio))`` is not; not ``Where``,
    whose kernel allocates outside ORT's memory pattern, see passes/masked_fill.py).
    The draw itself still holds a full zero input, its output and the mask (as many bytes as the unchunked
    Dropout's P, output and mask): what is saved is the scores → softmax chain around it. The exact policies
    then move that draw to the step's start, where nothing else is alive (passes/hoist_dropout.py). float16 zeros
    (``zeros_dtype``) draw the same mask (the tests check it), but ORT's CPU provider inserts casts to run a
    float16 Dropout in float32, so they save nothing there. Needs the softmax output read by the Dropout
    alone: run it after the recompute passes. Attention without dropout (Softmax read by the product
    directly) is chunked the same way.
    """

    name = "chunk_attention_forward"

    def __init__(self, chunks: int = 8, min_bytes: int = 64 * 1024, zeros_dtype: type = np.float32,
                 chunk_dropout_bytes: int | None = None) -> None:
        if chunks < 2:
            raise ValueError(f"chunks={chunks}: at least 2")
        if chunk_dropout_bytes is not None and chunk_dropout_bytes < 0:
            raise ValueError(f"chunk_dropout_bytes={chunk_dropout_bytes}: at least 0 (None: never)")
        self.chunks, self.min_bytes, self.zeros_dtype = chunks, min_bytes, zeros_dtype
        self.chunk_dropout_bytes = chunk_dropout_bytes

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
        graph = model.graph
        nodes = list(graph)
        if opset < 13 or not any(n.op_type == "Softmax" and n.domain in ("", "ai.onnx") for n in nodes):
            return outcome
        analysis = analysis_of(model)
        shapes = value_shapes(analysis, nodes)
        taken = ir_taken_names(graph)
        index = {n: i for i, n in enumerate(nodes)}
        for softmax in [n for n in nodes if n.op_type == "Softmax" and n.domain in ("", "ai.onnx")]:
            if analysis.boundary.is_backward(index[softmax]) or softmax.name.startswith(PREFIX):
                continue
            found = _forward_site(analysis, index, shapes, softmax)
            if isinstance(found, str):
                outcome.skipped.append(Skipped(softmax.name, FORWARD_PATTERN, found))
                continue
            chain, dropout, anchor_view, product = found
            leading = shapes[softmax.outputs[0]][:-2]
            t2 = int(np.prod(shapes[softmax.outputs[0]])) * 4
            if t2 < self.min_bytes:
                outcome.skipped.append(Skipped(softmax.name, FORWARD_PATTERN, f"{t2} B (< min_bytes {self.min_bytes})"))
                continue
            axis = max(range(len(leading)), key=lambda i: (leading[i], i))
            k = min(self.chunks, leading[axis])
            if k < 2:
                outcome.skipped.append(Skipped(softmax.name, FORWARD_PATTERN, f"leading dimensions {leading}"))
                continue
            # Not exact: a Dropout per chunk draws other (equally distributed) random numbers. Only where asked
            # (the lossy policies) and where the whole draw would be large.
            chunked_draw = dropout is not None and self.chunk_dropout_bytes is not None \
                and t2 >= self.chunk_dropout_bytes
            # The mask encoder's anchor the product waited on (its view goes with a chunked draw: see below).
            mask_anchor = anchor_view.inputs[1] if chunked_draw and anchor_view is not None else None
            product_out, product_shape = product.outputs[0].name, shapes.get(product.outputs[0])
            region, first_after = _prepare_forward(graph, shapes, chain, softmax, dropout, anchor_view, product,
                                                   taken, self.zeros_dtype, chunked_draw)
            problem = _emit(graph, analysis, region, axis, k, taken, first_after)
            if not problem and mask_anchor is not None and product_shape is not None:
                _wait_for_mask_encoder(graph, product_out, mask_anchor, product_shape, taken)
            if problem:   # _prepare_forward's nodes stay: the same values, unchunked
                outcome.skipped.append(Skipped(softmax.name, FORWARD_PATTERN, problem))
                outcome.modified = True
                continue
            outcome.records.append(PassRecord("chunked", self.name, region.name, {
                "region": region.name, "pattern": FORWARD_PATTERN, "nodes": [n.name for n in region.nodes],
                "op_types": [n.op_type for n in region.nodes], "leading_dims": list(leading), "axis": axis,
                "chunks": k, "largest_tensor_bytes": t2,
                "mask_drawn_from": ("a Dropout per chunk" if chunked_draw else
                                    f"{np.dtype(self.zeros_dtype).name} zeros") if dropout is not None else None,
                "exact": not chunked_draw,
                "note": ("per-slice ops; a Dropout per chunk: the same keep probability, other random numbers "
                         "(statistically equivalent, not bit-identical)") if chunked_draw else
                        "per-slice ops; the Dropout's mask drawn in its place from zeros of the same shape"}))
            outcome.modified = True
        return outcome


def _wait_for_mask_encoder(graph: ir.Graph, product_out: str, anchor: ir.Value, shape: tuple[int, ...],
                           taken: set[str]) -> None:
    """The readers of the chunked product (concatenated, named ``product_out``) read it through a view gated
    on the mask encoder's ``anchor``. With a Dropout per chunk the masks are concatenated for the encoder,
    and nothing in the forward waited for it any more: under ORT's DEFAULT order the encoder then ran when
    its backward decoder pulled it in, and every chunk's bool mask (GPT-tiny: 4 MiB per block) stayed alive
    until then."""
    whole = next((v for n in graph for v in n.outputs if v.name == product_out), None)
    if whole is None or not list(whole.uses()):
        return
    editor = IrGraphEditor(graph, taken, PREFIX)
    uses = list(whole.uses())
    gated = editor.gate(whole, anchor, shape=list(shape), elem=ir.DataType.FLOAT, after_elem=ir.DataType.INT64,
                        name=editor.name(f"{_short(product_out)}_after_mask_encoder"))
    graph.insert_after(whole.producer(), editor.nodes)
    for use in uses:
        use.node.replace_input_with(use.idx, gated)
    order = stable_toposort(list(graph), "chunk_attention")   # the encoder may come later in the list
    graph.remove([n for n in graph])
    graph.extend(order)


def _forward_site(analysis: GraphAnalysis, index: dict[ir.Node, int], shapes: dict[ir.Value, tuple[int, ...]],
                  softmax: ir.Node) -> tuple[list[ir.Node], ir.Node | None, ir.Node | None, ir.Node] | str:
    """(chain above the softmax, Dropout or None, the anchor view between Dropout and product or None, the
    product with V) of a forward attention, or why ``softmax`` is not one."""
    out = shapes.get(softmax.outputs[0])
    if out is None or len(out) < 3 or not separable(softmax, len(out)):
        return "not a softmax over the last axis of a rank ≥ 3 tensor"
    leading = out[:-2]

    def readers(v: ir.Value) -> list[ir.Node]:
        return [u.node for u in v.uses()]

    def same_shape_view(n: ir.Node) -> bool:
        return n.op_type == "Reshape" and shapes.get(n.outputs[0]) == shapes.get(n.inputs[0])

    probs = readers(softmax.outputs[0])
    if len(probs) != 1:
        return "the probabilities are read elsewhere too (stashed for backward: run after the recompute passes)"
    dropout, after = None, softmax.outputs[0]
    if probs[0].op_type == "Dropout" and probs[0].domain in ("", "ai.onnx"):
        dropout = probs[0]
        if len(dropout.inputs) < 3 or len(dropout.outputs) < 2 or not dropout.outputs[1].name:
            return "Dropout without ratio, training_mode or mask"
        if _const_value(dropout.inputs[2]) is not True or _const_value(dropout.inputs[1]) is None:
            return "Dropout's ratio or training_mode is not a constant (training_mode true)"
        if _attr(dropout, "seed", None) is not None:
            return "Dropout with a seed attribute"
        after = dropout.outputs[0]
    anchor_view = None
    readers_after = readers(after)
    if len(readers_after) == 1 and same_shape_view(readers_after[0]):
        anchor_view = readers_after[0]
        readers_after = readers(anchor_view.outputs[0])
    if len(readers_after) != 1 or readers_after[0].op_type != "MatMul":
        return "the (dropped-out) probabilities are not read by one MatMul alone"
    product = readers_after[0]
    if product.inputs[0] is not (anchor_view.outputs[0] if anchor_view else after):
        return "the probabilities are not the product's left operand"
    ps = shapes.get(product.outputs[0])
    if ps is None or ps[:-2] != leading or len(ps) != len(out):
        return "the product's output does not share the leading dimensions"
    chain: list[ir.Node] = []
    v = softmax.inputs[0]
    while (p := v.producer()) is not None and not analysis.boundary.is_backward(index[p]) \
            and len(readers(v)) == 1 and separable(p, len(out)) and shapes.get(p.outputs[0]) == out[:-2] + out[-2:]:
        chain.insert(0, p)
        data = [i for i in p.inputs if i is not None and (s := shapes.get(i)) is not None and s[:-2] == leading]
        if p.op_type == "MatMul" or len(data) != 1:
            break
        v = data[0]
    return chain, dropout, anchor_view, product


def _const_value(v: ir.Value | None) -> object:
    """The Python value of a one-element constant (initializer or Constant node), else None."""
    array = const_array(v)
    return array.reshape(-1)[0].item() if array is not None and array.size == 1 else None


def _prepare_forward(graph: ir.Graph, shapes: dict[ir.Value, tuple[int, ...]], chain: list[ir.Node],
                     softmax: ir.Node, dropout: ir.Node | None, anchor_view: ir.Node | None, product: ir.Node,
                     taken: set[str], zeros_dtype: type = np.float32,
                     chunked_draw: bool = False) -> tuple[AttentionRegion, list[ir.Value]]:
    """Rewire one forward attention so that its T² part is a separable region: the Dropout draws its mask
    from float16 zeros, the product reads ``P / (1 - ratio) · Cast(mask)``. Returns the region and the
    values chunk 0 must wait for: the mask encoder's anchor, when the product was anchored on it, and the
    Dropout's float16 output (read by chunk 0's gate, so ORT frees it there: an output nobody reads
    stayed allocated, 8 MiB per layer on GPT-tiny)."""
    editor = IrGraphEditor(graph, taken, PREFIX)
    probs = softmax.outputs[0]
    out = shapes[probs]
    region = [*chain, softmax]
    if chunked_draw:
        # The Dropout itself goes into the region: each chunk draws its own mask (the masks are concatenated
        # for the mask's encoder, so chunk 0 must not wait on that encoder's anchor: it would wait on itself).
        for v in dropout.outputs:
            shapes[v] = out
        if anchor_view is not None:
            product.replace_input_with(0, dropout.outputs[0])
            graph.remove(anchor_view, safe=True)
        region += [dropout, product]
        return AttentionRegion(region, out[:-2], int(np.prod(out)) * 4, 0, shapes), []
    first_after = [anchor_view.inputs[1]] if anchor_view is not None else []
    if dropout is not None:
        ratio, mask = dropout.inputs[1], dropout.outputs[1]
        one = editor.shared_tensor(f"{PREFIX}_one_f32", np.array(1.0, dtype=np.float32))
        keep = editor.op("Sub", [one, ratio], "keep", ir.DataType.FLOAT, [])
        scaled = editor.op("Div", [probs, keep], "scaled", ir.DataType.FLOAT, list(out))
        # Mul by the mask as float, not Where(mask, scaled, 0): ORT's Where kernel takes two temporaries of
        # its output's size outside the memory pattern (passes/masked_fill.py). Same bits: scaled ≥ +0, so
        # scaled · 1 = scaled and scaled · 0 = +0 = Where's zero.
        kept = editor.op("Cast", [mask], "mask_f32", ir.DataType.FLOAT, list(out), to=ir.DataType.FLOAT)
        dropped = editor.op("Mul", [scaled, kept], "dropped", ir.DataType.FLOAT, list(out))
        apply_nodes = [scaled.producer(), kept.producer(), dropped.producer()]
        # The mask's draw: float16 zeros of the same shape, made at run time (a constant shape would be
        # folded into a resident initializer), once the chain's first input exists.
        first_input = next(i for i in (chain[0] if chain else softmax).inputs if i is not None)
        gated = editor.op("Add", [editor.shared_const(f"onnxcomp_shape_{'x'.join(map(str, out))}", list(out)),
                                  editor.zero_after(first_input, base=editor.name("zeros_after"))],
                          "zeros_shape", ir.DataType.INT64, [len(out)])
        zeros = editor.op("ConstantOfShape", [gated], f"zeros_{np.dtype(zeros_dtype).name}",
                          ir.DataType.from_numpy(np.dtype(zeros_dtype)), list(out),
                          value=ir.tensor(np.zeros(1, dtype=zeros_dtype)))
        dropout.replace_input_with(0, zeros)
        dropout.outputs[0].dtype = ir.DataType.from_numpy(np.dtype(zeros_dtype))
        first_after.append(dropout.outputs[0])
        new_before = [n for n in editor.nodes if n not in apply_nodes]
        graph.insert_before(dropout, new_before)
        graph.insert_after(dropout, apply_nodes)
        for n in new_before:
            shapes.update({v: tuple(v.shape) for v in n.outputs if v.shape is not None})
        shapes[scaled], shapes[kept], shapes[dropped], shapes[keep] = out, out, out, ()
        region += apply_nodes
        product.replace_input_with(0, dropped)
    if anchor_view is not None:
        if dropout is None:
            product.replace_input_with(0, probs)
        graph.remove(anchor_view, safe=True)
    region.append(product)
    return AttentionRegion(region, out[:-2], int(np.prod(out)) * 4, 0, shapes), first_after
