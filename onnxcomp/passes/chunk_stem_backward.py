"""Pass: the first layer's backward (ReluGrad → BatchNormalizationGrad → weight-only ConvGrad) in batch chunks.

A CNN's first layer works at the highest resolution, and its backward holds three full-size tensors at
once: ORT's ReluGrad reads dY and the decoded ReLU mask and writes a third; BatchNormalizationGrad reads
that and the decoded conv output and writes dX, which ConvGrad turns into dW. On ResNet-18 at batch 32,
64×64, each is 8 MiB and, once every stash is encoded, this point *is* the training-step peak.

The first conv's input is the image: nothing needs its input gradient, so dX is only a means to dW = Σₙ
dXₙ ⊛ imageₙ, a sum over the batch. BatchNorm couples the samples only through two per-channel sums,
Σ g and Σ g·(x − μ) (g: the gradient at BN's output). So, for batch chunks n ∈ [a, b):

* pass A: g chunk (the ReluGrad on a slice of dY and of the mask), x chunk; accumulate both sums;
* dBias = Σ g, dScale = inv_std · Σ g·(x − μ), the per-channel coefficients of
  dX = γ·inv_std · (g − Σg/N − (x − μ)·inv_std²·Σg(x − μ)/N)   (N = batch·H·W, training-mode BN);
* pass B: g and x chunks again, the dX chunk, ConvGrad on it and the image chunk; dW summed over chunks.

No full-size dX or ReLU output gradient is ever alive; dY stays (it is the one input). A tensor that reaches
the region through an elementwise Cast (the native fp16 decode, the Cast of a decoded bool mask) is sliced
*before* the Cast, so the full-precision decode is never materialised either.

Exact up to float rounding (the sums run in a different order than ORT's kernel): not bit-identical, so it
belongs to the lossy policies, where it runs last (after the encodings whose decodes it slices). Ordering:
every chunk's slices add a zero derived from the previous chunk's result (``zero_after``), so under both ORT
execution orders one chunk's temporaries are alive at a time. Kept only where the planner predicts a lower
training-step peak; the chunk count is the one with the lowest prediction.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from ..analysis import GraphAnalysis, analyze_model
from ..errors import OnnxcompError
from .records import PassRecord
from .editor import GraphEditor
from .base import (GraphPass, PassResult, Skipped, check_model, even_bounds, node_attr,
                   require_training_graph, taken_names, unique_name)

MS_DOMAIN = "com.microsoft"
DEFAULT_CHUNKS = (2, 4, 8)
# Names of everything this pass adds start with this: a re-run recognises a rewritten region.
PREFIX = "onnxcomp_chunked"
TRIGGER_FLAT_SHAPE = "onnxcomp_trigger_flat_shape"
PATTERN = "BatchNormalizationGrad→weight-only ConvGrad"


@dataclass
class _Site:
    bn: onnx.NodeProto                     # BatchNormalizationGrad
    conv: onnx.NodeProto                   # ConvGrad with no input-gradient output
    relu: onnx.NodeProto | None            # ReluGrad feeding the BN gradient, absorbed when it has no other reader
    shape: tuple[int, int, int, int]       # the BN input, NCHW
    forward_conv: onnx.NodeProto | None    # the Conv whose output is the BN input, recomputed per chunk

    @property
    def name(self) -> str:
        return self.bn.name


def _is_trigger(node: onnx.NodeProto) -> bool:
    """A one-element timing read (zero_after's first node): it may move to another tensor of the same type."""
    return node.op_type == "Reshape" and len(node.input) == 2 and node.input[1] == TRIGGER_FLAT_SHAPE


def _find_sites(analysis: GraphAnalysis) -> tuple[list[_Site], list[Skipped]]:
    nodes = analysis.nodes
    sites: list[_Site] = []
    skipped: list[Skipped] = []
    pattern = PATTERN
    for node in nodes:
        if node.op_type != "BatchNormalizationGrad" or node.domain != MS_DOMAIN or node.name.startswith(PREFIX):
            continue
        dx = analysis.tensors.get(node.output[0])
        if dx is None or len(dx.consumers) != 1:
            continue
        conv = nodes[dx.consumers[0]]
        if conv.op_type != "ConvGrad" or conv.input[0] != node.output[0]:
            continue
        if conv.output and conv.output[0]:
            continue   # the conv's input gradient is needed: not a first layer
        if len(conv.output) < 2 or not conv.output[1]:
            continue
        shape = analysis.tensors[node.input[1]].shape
        if shape is None or len(shape) != 4 or shape[0] < 2:
            skipped.append(Skipped(node.name, pattern, f"the BN input has no static NCHW shape with batch >= 2 "
                                   f"(shape {shape})"))
            continue
        if node_attr(conv, "group", 1) != 1:
            skipped.append(Skipped(node.name, pattern, "grouped convolution"))
            continue
        img = analysis.tensors.get(conv.input[1])
        if img is None or img.shape is None or img.shape[0] != shape[0]:
            skipped.append(Skipped(node.name, pattern, "the conv input has no static shape with the same batch"))
            continue
        dy = analysis.tensors[node.input[0]]
        relu = None
        if dy.producer is not None and nodes[dy.producer].op_type == "ReluGrad":
            readers = [nodes[c] for c in dy.consumers if nodes[c] is not node]
            if all(_is_trigger(r) for r in readers):
                relu = nodes[dy.producer]
        others = [nodes[c] for c in dy.consumers if nodes[c] is not node and not _is_trigger(nodes[c])]
        if relu is None and others:
            skipped.append(Skipped(node.name, pattern, f"its output gradient is also read by "
                                   f"{[o.name for o in others]}"))
            continue
        sites.append(_Site(node, conv, relu, tuple(shape), _recomputable_conv(analysis, node, conv)))  # type: ignore[arg-type]
    return sites, skipped


def _recomputable_conv(analysis: GraphAnalysis, bn: onnx.NodeProto, conv: onnx.NodeProto) -> onnx.NodeProto | None:
    """The forward Conv producing the BN input from a graph input (the image) with the ConvGrad's weight:
    rerunning it on a batch chunk gives that chunk's BN input exactly, so the BN input needs no stash."""
    x = analysis.tensors[bn.input[1]]
    if x.producer is None:
        return None
    fwd = analysis.nodes[x.producer]
    image = analysis.tensors.get(fwd.input[0]) if fwd.input else None
    if fwd.op_type != "Conv" or fwd.domain not in ("", "ai.onnx") or image is None or image.producer is not None:
        return None
    if fwd.input[0] != conv.input[1] or fwd.input[1] != conv.input[2]:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in fwd.attribute}
    return fwd if attrs == {a.name: helper.get_attribute_value(a) for a in conv.attribute} else None


def _spans(n: int, k: int) -> list[tuple[int, int]]:
    bounds = even_bounds(n, k)
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


class ChunkedStemBackwardPass(GraphPass):
    """chunks: candidate chunk counts (the planner picks). force: rewrite every site with the first count,
    without asking the planner (tests, measurements)."""

    name = "chunk_stem_backward"

    def __init__(self, chunks: tuple[int, ...] | int = DEFAULT_CHUNKS, force: bool = False) -> None:
        counts = (chunks,) if isinstance(chunks, int) else tuple(chunks)
        if not counts or any(not isinstance(c, int) or c < 2 for c in counts):
            raise OnnxcompError(f"ChunkedStemBackwardPass chunks must be integers >= 2 (got {chunks!r})")
        self.chunks = counts
        self.force = force

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        result = PassResult(self.copy(model))
        sites, skipped = _find_sites(analyze_model(result.model))
        result.skipped.extend(skipped)
        if not sites:
            return result
        from ..planner.predict import predicted_live

        current = result.model
        for site in sites:
            batch = site.shape[0]
            counts = [k for k in self.chunks if k <= batch]
            if not counts:
                result.skipped.append(Skipped(site.name, PATTERN, f"batch {batch} is smaller than every chunk "
                                              f"count {self.chunks}"))
                continue
            if self.force:
                current = _rewrite(current, site.name, counts[0])
                result.records.append(self._record(site, counts[0]))
                continue
            seen, live = predicted_live(current)
            peak_before = int(live.max())
            replaced = {site.bn.name, site.conv.name} | ({site.relu.name} if site.relu is not None else set())
            before = int(max(live[i] for i, nd in enumerate(seen.graph.node) if nd.name in replaced))
            trials = []
            for k in counts:
                trial = _rewrite(current, site.name, k)
                seen, live = predicted_live(trial)
                region = int(max(live[i] for i, nd in enumerate(seen.graph.node) if nd.name.startswith(_prefix(site))))
                trials.append((region, k, trial, int(live.max())))
            region, k, trial, peak_after = min(trials, key=lambda t: (t[0], t[1]))
            if region >= before or peak_after > peak_before:
                result.skipped.append(Skipped(site.name, PATTERN, f"batch chunks would not lower the predicted "
                                              f"bytes ({before / 2**20:.1f} -> {region / 2**20:.1f} MiB at the "
                                              f"region, {peak_before / 2**20:.1f} -> {peak_after / 2**20:.1f} MiB "
                                              f"at the peak)"))
                continue
            current = trial
            result.records.append(self._record(site, k, region_before=before, region_after=region,
                                               predicted_peak_before=peak_before, predicted_peak_after=peak_after))
        if result.records:
            check_model(current, "chunk_stem_backward pass")
        result.model = current
        return result


    def _record(self, site: _Site, chunks: int, **predicted: int) -> PassRecord:
        dropped = [site.bn.input[1]] if site.forward_conv is not None else []
        return PassRecord("chunked", self.name, site.name, {
            "site": site.name, "conv_grad": site.conv.name, "chunks": chunks,
            "relu_grad": site.relu.name if site.relu is not None else None, "dropped_stashes": dropped,
            **predicted, "pass": self.name}, tuple(dropped))


def _prefix(site: _Site) -> str:
    return f"{PREFIX}_{site.bn.input[1].replace('/', '_').strip('_')}"


def _rewrite(model: onnx.ModelProto, site_name: str, k: int) -> onnx.ModelProto:
    """A copy of ``model`` with the site's backward region replaced by ``k`` batch chunks."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    analysis = analyze_model(out)
    sites, _ = _find_sites(analysis)
    region = _ChunkedRegion(out.graph, analysis, next(s for s in sites if s.name == site_name), k)
    region.statistics_pass()
    region.coefficients()
    region.bn_parameter_gradients()
    region.dx_pass()
    region.splice()
    return out


class _ChunkedRegion:
    """The replacement of one site's backward region (BatchNormalizationGrad, ConvGrad and the ReluGrad
    before them), built in named steps:

    1. ``statistics_pass``: Σ g and Σ g·(x − μ) per channel, chunk after chunk;
    2. ``coefficients``: dX = a·g + b·(x − μ) + c, with a = γ·inv_std, b = −a·inv_std·dScale/N, c = −a·Σg/N;
    3. ``bn_parameter_gradients``: BN's dScale and dBias outputs (their accumulators follow them);
    4. ``dx_pass``: dX chunk by chunk, straight into ConvGrad; dW (and dB) summed over chunks;
    5. ``splice``: the new nodes replace the region in the node list, in an order both ORT orders keep.
    """

    def __init__(self, graph: onnx.GraphProto, analysis: GraphAnalysis, site: _Site, k: int) -> None:
        self.graph, self.analysis, self.site = graph, analysis, site
        self.bn, self.conv, self.relu, self.fwd = site.bn, site.conv, site.relu, site.forward_conv
        self.n, self.c, self.h, self.w = site.shape
        self.nodes = list(graph.node)
        self.taken = taken_names(graph)
        self.b = GraphEditor(graph, self.taken, _prefix(site))
        self.removed = [self.bn, self.conv] + ([self.relu] if self.relu is not None else [])
        self.removed_outputs = {o for nd in self.removed for o in nd.output if o}
        self.grad_in = self.relu.input[0] if self.relu is not None else self.bn.input[0]
        self.grad_elem = self.elem_of(self.grad_in)
        self.srcs = {"g": self.source(self.grad_in)}
        if self.fwd is None:
            self.srcs["x"] = self.source(self.bn.input[1])
        if self.relu is not None:
            self.srcs["mask"] = self.source(self.relu.input[1])
        self.image = self.conv.input[1]
        self.img_shape = list(analysis.tensors[self.image].shape)
        self.shape_c11 = self.b.const("c11", TensorProto.INT64, [1, self.c, 1, 1])
        self.axes = self.b.const("axes", TensorProto.INT64, [0, 2, 3])
        self.axis0 = self.b.const("axis0", TensorProto.INT64, [0])
        self.chan = [1, self.c, 1, 1]
        self.spans = _spans(self.n, k)
        self.bounds: dict[tuple[int, int, str | None], tuple[str, str]] = {}   # one start/end per chunk and gate
        self.bn_outs = list(self.bn.output) + [""] * 3
        self.conv_outs = list(self.conv.output) + [""] * 3

    # -- reading chunks ----------------------------------------------------------------------------------
    def elem_of(self, name: str) -> int:
        return helper.np_dtype_to_tensor_dtype(self.analysis.tensors[name].type.dtype)

    def source(self, name: str) -> tuple[str, int | None]:
        """Where to slice ``name``: the input of the Cast producing it (sliced, then cast) or itself."""
        t = self.analysis.tensors[name]
        if t.producer is not None:
            p = self.nodes[t.producer]
            if p.op_type == "Cast" and self.analysis.tensors[p.input[0]].shape == t.shape:
                return p.input[0], node_attr(p, "to", TensorProto.FLOAT)
        return name, None

    def chunk(self, key: str, lo: int, hi: int, gate: str | None, shape: list[int]) -> str:
        b = self.b
        src, cast_to = self.srcs[key] if key in self.srcs else (key, None)
        if (lo, hi, gate) not in self.bounds:
            start, end = b.const(f"start{lo}", TensorProto.INT64, [lo]), b.const(f"end{hi}", TensorProto.INT64, [hi])
            if gate is not None:
                start = b.op("Add", [start, gate], "start", TensorProto.INT64, [1])
                end = b.op("Add", [end, gate], "end", TensorProto.INT64, [1])
            self.bounds[(lo, hi, gate)] = (start, end)
        start, end = self.bounds[(lo, hi, gate)]
        sl = b.op("Slice", [src, start, end, self.axis0], f"{key}_rows", self.elem_of(src), shape)
        return b.op("Cast", [sl], f"{key}_cast", cast_to, shape, to=cast_to) if cast_to is not None else sl

    def recomputed_x(self, img: str, shape: list[int]) -> str:
        """The BN input rebuilt from an image chunk by the stem's forward Conv."""
        return self.b.op("Conv", [img, *self.fwd.input[1:]], "x_recomputed", TensorProto.FLOAT, shape,
                         **{a.name: helper.get_attribute_value(a) for a in self.fwd.attribute})

    def x_chunk(self, lo: int, hi: int, gate: str | None) -> str:
        shp = [hi - lo, self.c, self.h, self.w]
        if self.fwd is None:
            return self.chunk("x", lo, hi, gate, shp)
        return self.recomputed_x(self.chunk(self.image, lo, hi, gate, [hi - lo, *self.img_shape[1:]]), shp)

    def g_chunk(self, lo: int, hi: int, gate: str | None) -> str:
        shp = [hi - lo, self.c, self.h, self.w]
        dy = self.chunk("g", lo, hi, gate, shp)
        if self.relu is None:
            return dy
        mask = self.chunk("mask", lo, hi, gate, shp)
        return self.b.op("ReluGrad", [dy, mask], "relu_grad", TensorProto.FLOAT, shp, domain=MS_DOMAIN)

    # -- the steps ---------------------------------------------------------------------------------------
    def statistics_pass(self) -> None:
        """Pass A: Σ g and Σ g·(x − μ) per channel, chunk after chunk. Everything waits for the gradient input
        (a zero from one of its elements): no recomputation in the forward pass, and the analysis sees every
        new node as backward."""
        b, F, chan = self.b, TensorProto.FLOAT, self.chan
        bn = self.bn
        scale, mean, inv_std = bn.input[2], bn.input[3], bn.input[4]
        sum_g = sum_gx = None
        gate = b.zero_after(self.grad_in, self.grad_elem)
        for lo, hi in self.spans:
            shp = [hi - lo, self.c, self.h, self.w]
            g = self.g_chunk(lo, hi, gate)
            x = self.x_chunk(lo, hi, gate)
            if sum_g is None:   # after the first slices, so that decoders stay right before their readers
                gated_c11 = b.op("Add", [self.shape_c11, gate], "c11_gated", TensorProto.INT64, [4])
                self.mean4 = b.op("Reshape", [mean, gated_c11], "mean", F, chan)
                self.inv4 = b.op("Reshape", [inv_std, gated_c11], "inv_std", F, chan)
                self.scale4 = b.op("Reshape", [scale, gated_c11], "scale", F, chan)
            xc = b.op("Sub", [x, self.mean4], "x_centred", F, shp)
            gx = b.op("Mul", [g, xc], "g_x", F, shp)
            sg = b.op("ReduceSum", [g, self.axes], "sum_g_part", F, chan, keepdims=1)
            sgx = b.op("ReduceSum", [gx, self.axes], "sum_gx_part", F, chan, keepdims=1)
            sum_g = sg if sum_g is None else b.op("Add", [sum_g, sg], "sum_g", F, chan)
            sum_gx = sgx if sum_gx is None else b.op("Add", [sum_gx, sgx], "sum_gx", F, chan)
            # Both sums, so that under ORT's DEFAULT order neither reduction is left pending (holding its chunk).
            gate = b.op("Add", [b.zero_after(sum_g, F), b.zero_after(sum_gx, F)], "gate", TensorProto.INT64, [1])
        assert sum_g is not None and sum_gx is not None
        self.sum_g, self.sum_gx = sum_g, sum_gx

    def coefficients(self) -> None:
        """dX = a·g + b·(x − μ) + c with a = γ·inv_std, b = −a·inv_std·dScale/N, c = −a·Σg/N."""
        b, F, chan = self.b, TensorProto.FLOAT, self.chan
        count = float(self.n * self.h * self.w)
        inv_count = unique_name(f"{b.prefix}_inv_count", self.taken)
        self.graph.initializer.append(helper.make_tensor(inv_count, F, [], [1.0 / count]))
        self.d_scale4 = b.op("Mul", [self.sum_gx, self.inv4], "d_scale", F, chan)
        self.coef_a = b.op("Mul", [self.scale4, self.inv4], "coef_a", F, chan)
        a_over_n = b.op("Mul", [self.coef_a, inv_count], "coef_a_over_n", F, chan)
        t = b.op("Mul", [a_over_n, self.inv4], "coef_b_part", F, chan)
        t = b.op("Mul", [t, self.d_scale4], "coef_b_neg", F, chan)
        self.coef_b = b.op("Neg", [t], "coef_b", F, chan)
        t = b.op("Mul", [a_over_n, self.sum_g], "coef_c_neg", F, chan)
        self.coef_c = b.op("Neg", [t], "coef_c", F, chan)

    def bn_parameter_gradients(self) -> None:
        """BN's dScale and dBias outputs; its gradient accumulators go right after them, before pass B (as
        eager accumulation had them)."""
        b = self.b
        shape_c = b.const("c", TensorProto.INT64, [self.c])
        finals: list[onnx.NodeProto] = []
        if self.bn_outs[1]:
            finals.append(helper.make_node("Reshape", [self.d_scale4, shape_c], [self.bn_outs[1]],
                                           name=unique_name(f"{b.prefix}_d_scale__reshape", self.taken)))
        if self.bn_outs[2]:
            finals.append(helper.make_node("Reshape", [self.sum_g, shape_c], [self.bn_outs[2]],
                                           name=unique_name(f"{b.prefix}_d_bias__reshape", self.taken)))
        b.nodes += finals
        self.acc_at = len(b.nodes)

    def dx_pass(self) -> None:
        """Pass B: dX chunk by chunk, straight into ConvGrad; dW (and dB) summed over chunks."""
        b, F = self.b, TensorProto.FLOAT
        conv, conv_outs = self.conv, self.conv_outs
        w_name = conv.input[2]
        w_shape = list(self.analysis.tensors[conv_outs[1]].shape or self.analysis.tensors[w_name].shape)
        gate = b.zero_after(self.coef_c, F)
        d_w = d_b = None
        for lo, hi in self.spans:
            shp = [hi - lo, self.c, self.h, self.w]
            g = self.g_chunk(lo, hi, gate)
            img = self.chunk(self.image, lo, hi, gate, [hi - lo, *self.img_shape[1:]])
            x = self.chunk("x", lo, hi, gate, shp) if self.fwd is None else self.recomputed_x(img, shp)
            xc = b.op("Sub", [x, self.mean4], "x_centred", F, shp)
            ga = b.op("Mul", [g, self.coef_a], "dx_a", F, shp)
            xb = b.op("Mul", [xc, self.coef_b], "dx_b", F, shp)
            s = b.op("Add", [ga, xb], "dx_ab", F, shp)
            dx = b.op("Add", [s, self.coef_c], "dx", F, shp)
            dw_k = b.tensor("d_w_part", F, w_shape)
            db_k = b.tensor("d_b_part", F, [w_shape[0]]) if conv_outs[2] else ""
            b.nodes.append(helper.make_node("ConvGrad", [dx, img, w_name], ["", dw_k, db_k],
                                            name=unique_name(f"{b.prefix}_conv_grad", self.taken), domain=conv.domain,
                                            **{a.name: helper.get_attribute_value(a) for a in conv.attribute}))
            d_w = dw_k if d_w is None else b.op("Add", [d_w, dw_k], "d_w", F, w_shape)
            if db_k:
                d_b = db_k if d_b is None else b.op("Add", [d_b, db_k], "d_b", F, [w_shape[0]])
            gate = b.zero_after(d_w, F)
        b.nodes.append(helper.make_node("Identity", [d_w], [conv_outs[1]],
                                        name=unique_name(f"{b.prefix}_d_w", self.taken)))
        if conv_outs[2]:
            b.nodes.append(helper.make_node("Identity", [d_b], [conv_outs[2]],
                                            name=unique_name(f"{b.prefix}_d_b", self.taken)))

    def splice(self) -> None:
        """Replace the region by the new nodes: timing reads rewired, BN's accumulators moved in, dead decode
        Casts dropped, decoders right before their first slice, then a stable topological sort."""
        b, graph, nodes, removed = self.b, self.graph, self.nodes, self.removed
        removed_outputs = self.removed_outputs - {o for nd in b.nodes for o in nd.output}
        # Timing reads of removed tensors move to the region's gradient input (available at the same point).
        for nd in nodes:
            if any(nd is r for r in removed):
                continue
            for i, name in enumerate(nd.input):
                if name in removed_outputs:
                    if not _is_trigger(nd) or self.elem_of(name) != self.grad_elem:
                        raise OnnxcompError(f"chunk_stem_backward: {nd.name} reads {name} (internal error)")
                    nd.input[i] = self.grad_in
        from .eager_accumulation import ACCUMULATORS

        bn_accumulators = [nd for nd in nodes if nd.op_type in ACCUMULATORS and len(nd.input) > 1
                           and nd.input[1] in {o for o in self.bn_outs[1:3] if o}]
        b.nodes[self.acc_at:self.acc_at] = bn_accumulators
        removed += bn_accumulators
        pos = next(i for i, nd in enumerate(nodes) if nd is self.bn)
        kept = [nd for nd in nodes if not any(nd is r for r in removed)]
        pos = sum(1 for nd in nodes[:pos] if not any(nd is r for r in removed))
        new_nodes = _drop_dead(kept[:pos] + b.nodes + kept[pos:], graph)
        # A decoder of a sliced source runs right before its first slice (PRIORITY_BASED order follows the list).
        for src, _ in self.srcs.values():
            k = next((i for i, nd in enumerate(new_nodes) if src in nd.output), None)
            if k is None:
                continue
            first = next(i for i, nd in enumerate(new_nodes) if src in nd.input)
            if first > k + 1:
                new_nodes.insert(first - 1, new_nodes.pop(k))
        from .row_split import _stable_toposort

        available = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        new_nodes = _stable_toposort(new_nodes, available)
        del graph.node[:]
        graph.node.extend(new_nodes)
        graph.value_info.extend(b.infos)
        stale = removed_outputs - {o for nd in new_nodes for o in nd.output}
        keep_vi = [v for v in graph.value_info if v.name not in stale]
        del graph.value_info[:]
        graph.value_info.extend(keep_vi)


def _drop_dead(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Nodes whose outputs nobody reads (the full-size decode Casts this region no longer needs)."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for nd in nodes for i in nd.input} | outputs
        dead = [nd for nd in nodes if nd.op_type == "Cast" and not any(o in read for o in nd.output if o)]
        if not dead:
            return nodes
        nodes = [nd for nd in nodes if not any(nd is d for d in dead)]
