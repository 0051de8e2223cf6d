"""Emission for chunk_backward: one region rewritten chunk by chunk on the onnx-ir graph (IrGraphEditor),
then spliced into the node list in place of the region (see the package docstring for the scheme)."""
from __future__ import annotations


import numpy as np
import onnx_ir as ir
from onnx import helper

from ...analysis import GraphAnalysis
from ...errors import OnnxcompError
from ..base import even_bounds
from ..editor import IrGraphEditor, stable_toposort, unique_name
from .regions import Region, is_trigger, prefix_of

F = ir.DataType.FLOAT
I64 = ir.DataType.INT64
# Side-effect-free ops a region can leave unread: full-size decode Casts and their gated views.
_PURE = {"Cast", "Reshape", "Identity", "Slice", "Less", "Add", "Flatten"}


def spans(n: int, k: int) -> list[tuple[int, int]]:
    """``k`` sample ranges [a, b) covering ``range(n)``, lengths differing by at most one."""
    bounds = even_bounds(n, k)
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def rewrite_in_place(model: ir.Model, analysis: GraphAnalysis, region: Region, chunks: int) -> None:
    """Run ``region`` of ``model`` in ``chunks`` batch chunks, editing the graph in place. ``analysis``: of
    ``model``'s graph as it is now (shapes, element types, the backward boundary; its node list is the
    graph's, index for index)."""
    _ChunkedChain(model.graph, analysis, region, chunks).emit()


class _ChunkedChain:
    """The replacement of one region, built chunk by chunk with the graph editor:

    1. pass A (only with a BatchNorm): the ops above the BN per chunk (their weight gradients summed), then
       Σg and Σg·(x − μ) at the BN;
    2. the BN coefficients dX = a·g + b·(x − μ) + c and BN's dScale/dBias outputs (accumulators moved behind);
    3. pass B: per chunk, the ops above the BN again (input gradients only), the BN's dX, the ops below it
       with their weight gradients summed (without a BN: every op, once);
    4. splice: the new nodes replace the region in the node list (``_splice``).
    """

    def __init__(self, graph: ir.Graph, analysis: GraphAnalysis, region: Region, k: int) -> None:
        self.graph, self.analysis, self.region = graph, analysis, region
        self.nodes = list(graph)                      # index for index the analysis's node list
        by_name = {n.name: n for n in self.nodes}
        self.ops = [by_name[n] for n in region.nodes]
        self.values = _values_by_name(graph, self.nodes)
        self.b = IrGraphEditor(graph, prefix=prefix_of(region))
        self.n = region.batch
        self.spans = spans(self.n, k)
        self.bn_at = next((i for i, n in enumerate(self.ops) if n.op_type == "BatchNormalizationGrad"), None)
        self.recompute = None
        if region.recomputed_input is not None:
            self.recompute = self.values[region.recomputed_input].producer()
        self.grad_in = self.values[region.grad_input]
        self.grad_elem = self.elem_of(self.grad_in)
        self.axis0 = self.b.const("axis0", I64, [0])
        self.bounds: dict[tuple[int, int, ir.Value | None], tuple[ir.Value, ir.Value]] = {}
        self.slices: dict[tuple[ir.Value, int, int, ir.Value | None], ir.Value] = {}
        self.sums: dict[ir.Value, ir.Value] = {}      # original parameter gradient -> running sum
        self.replaced: list[tuple[ir.Value, ir.Value]] = []   # (region output, the new value taking its place)
        self.acc_at = 0

    # -- reading chunks ----------------------------------------------------------------------------------
    def elem_of(self, value: ir.Value) -> ir.DataType:
        return ir.DataType(helper.np_dtype_to_tensor_dtype(self.analysis.tensors[value.name].type.dtype))

    def shape_of(self, value: ir.Value) -> list[int]:
        return list(self.analysis.tensors[value.name].shape)

    def source(self, value: ir.Value) -> tuple[ir.Value, ir.DataType | None]:
        """Where to slice ``value``: the input of the Cast producing it (sliced, then cast) or itself, so a
        full-precision decode is never materialised."""
        p = value.producer()
        if p is not None and p.op_type == "Cast" and \
                self.analysis.tensors[p.inputs[0].name].shape == self.analysis.tensors[value.name].shape:
            return p.inputs[0], ir.DataType(p.attributes.get_int("to", F))
        return value, None

    def chunk(self, value: ir.Value, lo: int, hi: int, gate: ir.Value | None) -> ir.Value:
        """Samples [lo, hi) of ``value``; the slice waits for ``gate``."""
        key = (value, lo, hi, gate)
        if key in self.slices:
            return self.slices[key]
        b = self.b
        src, cast_to = self.source(value)
        if (lo, hi, gate) not in self.bounds:
            start, end = b.const(f"start{lo}", I64, [lo]), b.const(f"end{hi}", I64, [hi])
            if gate is not None:
                start = b.op("Add", [start, gate], "start", I64, [1])
                end = b.op("Add", [end, gate], "end", I64, [1])
            self.bounds[(lo, hi, gate)] = (start, end)
        start, end = self.bounds[(lo, hi, gate)]
        shape = [hi - lo, *self.shape_of(value)[1:]]
        base = value.name.rsplit("/", 1)[-1] or "t"
        out = b.op("Slice", [src, start, end, self.axis0], f"{base}_rows", self.elem_of(src), shape)
        if cast_to is not None:
            out = b.op("Cast", [out], f"{base}_cast", cast_to, shape, to=cast_to)
        self.slices[key] = out
        return out

    # -- one op on one chunk -----------------------------------------------------------------------------
    def op(self, i: int, g: ir.Value, lo: int, hi: int, gate: ir.Value | None, params: bool) -> ir.Value | None:
        """Op ``i`` of the region on samples [lo, hi) given its output gradient's chunk ``g``; returns the
        chunk of its input gradient (None at the terminal). ``params``: also its weight gradients (summed)."""
        node = self.ops[i]
        out_shape = [hi - lo, *self.shape_of(node.outputs[0])[1:]] if node.outputs[0].name else None
        kind = node.op_type
        if kind == "ConvGrad":
            return self.conv_grad(i, g, lo, hi, gate, params, out_shape)
        attrs = dict(node.attributes)
        if kind in ("ReluGrad", "LeakyReluGrad"):
            x = self.chunk(node.inputs[1], lo, hi, gate)
            return self.b.op(kind, [g, x], kind.lower(), F, out_shape, domain=node.domain, **attrs)
        if kind == "MaxPoolGrad":
            idx = self.chunk(node.inputs[1], lo, hi, gate)
            if lo:
                per_sample = int(np.prod(self.shape_of(node.outputs[0])[1:], dtype=np.int64))
                offset = self.b.const(f"index_offset{lo}", I64, [lo * per_sample], dims=[])
                idx = self.b.op("Sub", [idx, offset], "indices_rebased", I64,
                                [hi - lo, *self.shape_of(node.inputs[1])[1:]])
            return self.b.op(kind, [g, idx], "max_pool_grad", F, out_shape, domain=node.domain, **attrs)
        if kind == "AveragePoolGrad":
            return self.b.op(kind, [g], "average_pool_grad", F, out_shape, domain=node.domain, **attrs)
        raise OnnxcompError(f"chunk_backward: {kind} cannot run in batch chunks (internal error)")

    def conv_grad(self, i: int, g: ir.Value, lo: int, hi: int, gate: ir.Value | None, params: bool,
                  out_shape: list[int] | None) -> ir.Value | None:
        """ConvGrad on one chunk: dX (none at the terminal) and, with ``params``, dW/dB parts added to the
        running sums."""
        b, node = self.b, self.ops[i]
        x = self.chunk(node.inputs[1], lo, hi, gate)   # at a recomputed stem: the image chunk, shared
        last = i == len(self.ops) - 1
        outs: list[tuple[str, ir.DataType, list[int] | None]] = [("", F, None)] * 3
        if not last:
            outs[0] = (b.name("dx"), F, out_shape)
        for j in (1, 2):
            if params and len(node.outputs) > j and node.outputs[j].name:
                outs[j] = (b.name("d_w_part" if j == 1 else "d_b_part"), F, self.shape_of(node.outputs[j]))
        made = b.node("ConvGrad", [g, x, node.inputs[2]], outs, name=unique_name(f"{b.prefix}_conv_grad", b.taken),
                      domain=node.domain, **dict(node.attributes))
        for j in (1, 2):
            if outs[j][0]:
                self.add_to_sum(node.outputs[j], made.outputs[j], "d_w" if j == 1 else "d_b")
        return None if last else made.outputs[0]

    def add_to_sum(self, original: ir.Value, part: ir.Value, base: str) -> None:
        """Running sum over chunks of a weight (or bias) gradient: one part alive at a time."""
        if original not in self.sums:
            self.sums[original] = part
            return
        self.sums[original] = self.b.op("Add", [self.sums[original], part], base, F, self.shape_of(original))

    def chunk_gate(self, extra: list[ir.Value] = ()) -> ir.Value:
        """A zero that exists once every running sum (and ``extra``) of the chunk just emitted does: no
        pending reduction under ORT's DEFAULT order holds its chunk."""
        after = list(self.sums.values()) + list(extra)
        return self.b.zero_after_all(after, F)

    def centred_x_chunk(self, lo: int, hi: int, gate: ir.Value | None) -> ir.Value:
        """The chunk of x − μ (the BN input, centred). Rebuilt from the image by the stem's forward Conv
        where the BN input is recomputed, with −μ as that Conv's bias when it has none: MLAS adds the bias
        after the accumulation, and ``acc + (−μ)`` is ``acc − μ`` exactly in IEEE arithmetic, so the values
        are the ones ``Sub(Conv(img), μ)`` gives, with one full-size chunk output per chunk and pass fewer
        (the Conv's beside the Sub's: under a pinned mmap threshold every fresh buffer is page faults). Else the BN input's chunk (sliced or recomputed) minus μ."""
        b, bn = self.b, self.ops[self.bn_at]
        shp = [hi - lo, *self.shape_of(bn.inputs[1])[1:]]
        rc = self.recompute
        if rc is not None and (len(rc.inputs) < 3 or rc.inputs[2] is None):
            img = self.chunk(rc.inputs[0], lo, hi, gate)
            return b.op("Conv", [img, rc.inputs[1], self.neg_mean], "x_centred", F, shp, **dict(rc.attributes))
        if rc is None:
            x = self.chunk(bn.inputs[1], lo, hi, gate)
        else:
            img = self.chunk(rc.inputs[0], lo, hi, gate)
            x = b.op("Conv", [img, *rc.inputs[1:]], "x_recomputed", F, shp, **dict(rc.attributes))
        return b.op("Sub", [x, self.mean4], "x_centred", F, shp)

    # -- the passes --------------------------------------------------------------------------------------
    def emit(self) -> None:
        if self.bn_at is None:
            self.single_pass()
        else:
            self.statistics_pass()
            self.coefficients()
            self.bn_parameter_gradients()
            self.dx_pass()
        self.finish_parameters()
        _splice(self)

    def single_pass(self) -> None:
        gate = self.b.zero_after(self.grad_in, self.grad_elem)
        for lo, hi in self.spans:
            g = self.chunk(self.grad_in, lo, hi, gate)
            for i in range(len(self.ops)):
                g = self.op(i, g, lo, hi, gate, params=True)
            gate = self.chunk_gate()

    def statistics_pass(self) -> None:
        """Pass A: the ops above the BN (with their weight gradients), Σg and Σg·(x − μ) per channel."""
        b = self.b
        bn = self.ops[self.bn_at]
        n, c, h, w = self.shape_of(bn.inputs[1])
        self.c, self.hw = c, h * w
        self.chan = [1, c, 1, 1]
        shape_c11 = b.const("c11", I64, [1, c, 1, 1])
        axes = b.const("axes", I64, [0, 2, 3])
        self.mean4 = self.neg_mean = None
        sum_g = sum_gx = None
        gate = b.zero_after(self.grad_in, self.grad_elem)
        for lo, hi in self.spans:
            shp = [hi - lo, c, h, w]
            g = self.chunk(self.grad_in, lo, hi, gate)
            for i in range(self.bn_at):
                g = self.op(i, g, lo, hi, gate, params=True)
            if sum_g is None:   # after the first slices, so that decoders stay right before their readers
                self.per_channel_views(shape_c11, gate)
            xc = self.centred_x_chunk(lo, hi, gate)
            gx = b.op("Mul", [g, xc], "g_x", F, shp)
            sg = b.op("ReduceSum", [g, axes], "sum_g_part", F, self.chan, keepdims=1)
            sgx = b.op("ReduceSum", [gx, axes], "sum_gx_part", F, self.chan, keepdims=1)
            sum_g = sg if sum_g is None else b.op("Add", [sum_g, sg], "sum_g", F, self.chan)
            sum_gx = sgx if sum_gx is None else b.op("Add", [sum_gx, sgx], "sum_gx", F, self.chan)
            gate = self.chunk_gate([sum_g, sum_gx])
        self.sum_g, self.sum_gx = sum_g, sum_gx

    def per_channel_views(self, shape_c11: ir.Value, gate: ir.Value) -> None:
        """γ, inv_std and μ as [1, C, 1, 1] views that wait for ``gate`` (μ negated as a [C] Conv bias instead
        where centred_x_chunk folds it into the recomputing Conv)."""
        b, bn, c = self.b, self.ops[self.bn_at], self.c
        gated_c11 = b.op("Add", [shape_c11, gate], "c11_gated", I64, [4])
        self.inv4 = b.op("Reshape", [bn.inputs[4], gated_c11], "inv_std", F, self.chan)
        self.scale4 = b.op("Reshape", [bn.inputs[2], gated_c11], "scale", F, self.chan)
        rc = self.recompute
        if rc is not None and (len(rc.inputs) < 3 or rc.inputs[2] is None):
            gated_c = b.op("Add", [b.const("c_len", I64, [c]), gate], "c_gated", I64, [1])
            mean = b.op("Reshape", [bn.inputs[3], gated_c], "mean", F, [c])
            self.neg_mean = b.op("Neg", [mean], "neg_mean", F, [c])
        else:
            self.mean4 = b.op("Reshape", [bn.inputs[3], gated_c11], "mean", F, self.chan)

    def coefficients(self) -> None:
        """dX = a·g + b·(x − μ) + c with a = γ·inv_std, b = −a·inv_std·dScale/N, c = −a·Σg/N (training-mode
        BN, N = batch·H·W)."""
        b, chan = self.b, self.chan
        inv_count = b.const("inv_count", F, [1.0 / float(self.n * self.hw)], dims=[])
        self.d_scale4 = b.op("Mul", [self.sum_gx, self.inv4], "d_scale", F, chan)
        self.coef_a = b.op("Mul", [self.scale4, self.inv4], "coef_a", F, chan)
        a_over_n = b.op("Mul", [self.coef_a, inv_count], "coef_a_over_n", F, chan)
        t = b.op("Mul", [a_over_n, self.inv4], "coef_b_part", F, chan)
        t = b.op("Mul", [t, self.d_scale4], "coef_b_neg", F, chan)
        self.coef_b = b.op("Neg", [t], "coef_b", F, chan)
        t = b.op("Mul", [a_over_n, self.sum_g], "coef_c_neg", F, chan)
        self.coef_c = b.op("Neg", [t], "coef_c", F, chan)

    def bn_parameter_gradients(self) -> None:
        """BN's dScale and dBias outputs; the ops above the BN have their weight gradients complete here too,
        so their accumulators (and BN's) go right after, before pass B."""
        b, bn = self.b, self.ops[self.bn_at]
        shape_c = b.const("c", I64, [self.c])
        for j, total, base in ((1, self.d_scale4, "d_scale"), (2, self.sum_g, "d_bias")):
            if len(bn.outputs) > j and bn.outputs[j].name:
                self.take_place_of(bn.outputs[j], "Reshape", [total, shape_c],
                                   unique_name(f"{b.prefix}_{base}__reshape", b.taken))
        self.finish_parameters()
        self.acc_at = len(b.nodes)

    def dx_pass(self) -> None:
        """Pass B: the ops above the BN again (input gradients only), dX per chunk, the ops below it."""
        b = self.b
        bn = self.ops[self.bn_at]
        gate = b.zero_after(self.coef_c, F)
        for lo, hi in self.spans:
            shp = [hi - lo, *self.shape_of(bn.inputs[1])[1:]]
            g = self.chunk(self.grad_in, lo, hi, gate)
            for i in range(self.bn_at):
                g = self.op(i, g, lo, hi, gate, params=False)
            xc = self.centred_x_chunk(lo, hi, gate)
            ga = b.op("Mul", [g, self.coef_a], "dx_a", F, shp)
            xb = b.op("Mul", [xc, self.coef_b], "dx_b", F, shp)
            s = b.op("Add", [ga, xb], "dx_ab", F, shp)
            g = b.op("Add", [s, self.coef_c], "dx", F, shp)
            for i in range(self.bn_at + 1, len(self.ops)):
                g = self.op(i, g, lo, hi, gate, params=True)
            gate = self.chunk_gate()

    def finish_parameters(self) -> None:
        """Each running sum under the name the optimizer's accumulator reads (once per sum)."""
        for original, total in self.sums.items():
            self.take_place_of(original, "Identity", [total], unique_name(f"{self.b.prefix}_grad_out", self.b.taken))
        self.sums = {}

    def take_place_of(self, original: ir.Value, op: str, inputs: list[ir.Value], name: str) -> None:
        """A node whose output replaces the region's output ``original`` (same name and type: its readers,
        the accumulators, are rewired in the splice)."""
        made = self.b.node(op, inputs, [(original.name, F, None)], name=name)
        made.outputs[0].type, made.outputs[0].shape = original.type, original.shape
        self.replaced.append((original, made.outputs[0]))


def _values_by_name(graph: ir.Graph, nodes: list[ir.Node]) -> dict[str, ir.Value]:
    values = {v.name: v for v in graph.inputs if v.name}
    values.update(graph.initializers)
    values.update((v.name, v) for n in nodes for v in n.outputs if v.name)
    return values


# ------------------------------------------------------------------------------------------ splice

def _splice(chain: _ChunkedChain) -> None:
    """Replace the region by the new nodes: the region's outputs handed to their replacements, timing reads
    rewired, accumulators of gradients completed in pass A moved in, dead decode Casts dropped, decoders
    right before their first slice, then a stable topological sort; the node list is rebuilt in that order."""
    new = list(chain.b.nodes)
    _rewire_region_outputs(chain, new)
    removed = set(chain.ops)
    if chain.acc_at:
        early = _early_accumulators(chain.nodes, new[:chain.acc_at])
        new[chain.acc_at:chain.acc_at] = early
        removed |= set(early)
    kept = [nd for nd in chain.nodes if nd not in removed]
    pos = sum(1 for nd in chain.nodes[:chain.nodes.index(chain.ops[0])] if nd not in removed)
    order = _drop_dead(kept[:pos] + new + kept[pos:], chain.graph)
    _decoders_before_first_slice(chain, order)
    order = stable_toposort(order, "chunk_backward")
    _rebuild(chain.graph, chain.nodes + [nd for nd in chain.b.nodes if nd not in chain.nodes], order)


def _rewire_region_outputs(chain: _ChunkedChain, new: list[ir.Node]) -> None:
    """Readers of the region's outputs: those reproduced under the same name read the replacement; the
    rest may only be timing reads (another gate's trigger), which move to the region's input gradient."""
    for original, replacement in chain.replaced:
        original.replace_all_uses_with(replacement, replace_graph_outputs=True)
    region = set(chain.ops)
    for op in chain.ops:
        for v in op.outputs:
            if not v.name:
                continue
            for use in list(v.uses()):
                if use.node in region:
                    continue
                reader = use.node
                names = [i.name if i is not None else "" for i in reader.inputs]
                if not is_trigger(reader.op_type, names) or chain.elem_of(v) != chain.grad_elem:
                    raise OnnxcompError(f"chunk_backward: {reader.name} reads {v.name} (internal error)")
                reader.replace_input_with(use.idx, chain.grad_in)


def _early_accumulators(nodes: list[ir.Node], done: list[ir.Node]) -> list[ir.Node]:
    """Accumulators (in node order) of gradients that the nodes ``done`` complete."""
    from ..eager_accumulation import ACCUMULATORS

    made = {v for nd in done for v in nd.outputs if v.name}
    return [nd for nd in nodes if nd.op_type in ACCUMULATORS and len(nd.inputs) > 1 and nd.inputs[1] in made]


def _drop_dead(nodes: list[ir.Node], graph: ir.Graph) -> list[ir.Node]:
    """Pure nodes whose outputs nobody reads (the decodes, and their gates, this region no longer needs)."""
    outputs = set(graph.outputs)
    while True:
        read = {v for nd in nodes for v in nd.inputs if v is not None} | outputs
        dead = {nd for nd in nodes if nd.op_type in _PURE and nd.domain in ("", "ai.onnx")
                and not any(v in read for v in nd.outputs if v.name)}
        if not dead:
            return nodes
        nodes = [nd for nd in nodes if nd not in dead]


def _decoders_before_first_slice(chain: _ChunkedChain, order: list[ir.Node]) -> None:
    """A decoder of a sliced source runs right before its first slice (PRIORITY_BASED order follows the
    list). Only backward producers move: a forward encoder (native fp16's Cast) must stay in the forward
    pass, or the full-precision tensor it encodes would live until backward."""
    backward = {chain.nodes[i] for i in chain.analysis.boundary.backward}
    for src in dict.fromkeys(chain.source(value)[0] for value, *_ in chain.slices):
        producer = src.producer()
        if producer is None or producer not in backward or producer not in order:
            continue
        k = order.index(producer)
        first = next(i for i, nd in enumerate(order) if src in nd.inputs)
        if first > k + 1:
            order.insert(first - 1, order.pop(k))


def _rebuild(graph: ir.Graph, everything: list[ir.Node], order: list[ir.Node]) -> None:
    """The graph's node list becomes ``order``; nodes of ``everything`` left out are detached from their
    inputs (so no value keeps a reader that is gone)."""
    keep = set(order)
    for nd in everything:
        if nd not in keep:
            for i in range(len(nd.inputs)):
                nd.replace_input_with(i, None)
    graph.remove([nd for nd in graph])   # not "safe": kept nodes keep their inputs, only the order changes
    graph.extend(order)
