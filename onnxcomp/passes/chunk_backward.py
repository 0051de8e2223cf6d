"""Pass: backward regions in batch chunks — any chain of batch-separable backward ops down to a layer whose
input gradient nobody needs.

Where the step peak sits in backward (gradient maps plus weight gradients: BN-free deep nets, VGG's early
layers, a stem at high resolution), the full-size gradient maps of a region need not coexist: a region that
ends at a ConvGrad with no input-gradient output (the first layer: its input is the image) can run for batch
chunks n ∈ [a, b) one after the other, so only one chunk's temporaries are alive at a time. A region is a
linear chain of backward ops, each reading the previous one's output gradient as its only reader:

* separable per sample: ConvGrad's dX, ReluGrad, LeakyReluGrad, MaxPoolGrad (its flat NCHW indices rebased
  by the chunk's first sample), AveragePoolGrad;
* sums over the batch: ConvGrad's dW and dB — each chunk's part added to a running sum;
* BatchNormalizationGrad couples the samples through two per-channel sums, Σg and Σg·(x − μ): a region
  holds at most one, run in two passes (pass A: the ops above it and both sums, chunk by chunk; pass B: the
  ops above it again, dX = a·g + b·(x − μ) + c per chunk, and the ops below it). Where the BN sits right
  above a first-layer ConvGrad whose forward Conv read the image, its input is recomputed per chunk from the
  image (one stash fewer).

Anything else that couples the batch (a second BatchNorm, reductions over the batch, matrix products of the
classifier) ends a region: growth stops there and the reason is reported.

Exactness: a chunked region computes the same per-sample values, but a weight gradient (and each BN sum) is
accumulated chunk by chunk, ``(Σ_chunk1) + (Σ_chunk2)``, where ORT's kernel sums the samples in one
sequence: the results differ by float rounding only, never bit-identical (``exact: False`` on every
record, so ``--exact`` must not use it). Losses of the first step are identical (the forward pass is
untouched); later losses drift at rounding level.

Ordering: every chunk's slices add a zero derived from the previous chunk's running sums
(``GraphEditor.zero_after``), so under both ORT execution orders one chunk's temporaries are alive at a
time. The planner (planner/predict.py) picks the region length and chunk count; a rewrite is kept only
where it lowers the predicted bytes at the region and does not raise the predicted step peak.

``chunkable_regions(model)`` lists the candidates (for the budget planner); ``ChunkedBackwardPass(regions=
[names], chunks=...)`` rewrites a chosen subset.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..analysis import GraphAnalysis, analyze_model
from ..errors import OnnxcompError
from .base import (GraphPass, PassResult, Skipped, check_model, even_bounds, node_attr, require_training_graph,
                   taken_names, unique_name)
from .editor import GraphEditor
from .records import PassRecord

MS_DOMAIN = "com.microsoft"
DEFAULT_CHUNKS = (2, 4, 8)
# Names of everything the pass adds start with this: a re-run recognises a rewritten region.
PREFIX = "onnxcomp_chunked"
TRIGGER_FLAT_SHAPE = "onnxcomp_trigger_flat_shape"
PATTERN = "batch-chunked backward region"
# Backward ops a region may hold: op type -> index of the per-sample input it reads besides the gradient.
SEPARABLE: dict[str, int | None] = {"ConvGrad": 1, "ReluGrad": 1, "LeakyReluGrad": 1, "MaxPoolGrad": 1,
                                    "AveragePoolGrad": None, "BatchNormalizationGrad": 1}
# Region lengths the planner tries per terminal (the full chain is always tried too).
_LENGTHS = (2, 3, 4, 6, 8, 12)


@dataclass
class Region:
    """A chain of backward ops (top first) that can run in batch chunks, and what the planner predicts.

    ``predicted_peak``: chunk count -> predicted training-step peak after the rewrite (bytes);
    ``predicted_peak_before``: the same without it. ``exact`` is always False (rounding, see module doc)."""
    name: str
    nodes: tuple[str, ...]
    grad_input: str
    batch: int
    op_types: tuple[str, ...] = ()
    batchnorm: str | None = None
    recomputed_input: str | None = None       # the BN input rebuilt from the image per chunk (stash dropped)
    exact: bool = False
    predicted_peak_before: int | None = None
    predicted_peak: dict[int, int] = field(default_factory=dict)

    @property
    def terminal(self) -> str:
        return self.nodes[-1]

    def reduction(self, chunks: int) -> int | None:
        """Predicted bytes off the step peak with ``chunks`` chunks (None: not predicted)."""
        if self.predicted_peak_before is None or chunks not in self.predicted_peak:
            return None
        return self.predicted_peak_before - self.predicted_peak[chunks]

    def to_dict(self) -> dict:
        return {"name": self.name, "nodes": list(self.nodes), "op_types": list(self.op_types), "grad_input": self.grad_input, "batch": self.batch,
                "batchnorm": self.batchnorm, "recomputed_input": self.recomputed_input, "exact": self.exact,
                "predicted_peak_before": self.predicted_peak_before,
                "predicted_peak": {str(k): v for k, v in self.predicted_peak.items()}}


# ------------------------------------------------------------------------------------------ region finding

def _is_trigger(node: onnx.NodeProto) -> bool:
    """A one-element timing read (zero_after's first node): it may move to another tensor of the same type."""
    return node.op_type == "Reshape" and len(node.input) == 2 and node.input[1] == TRIGGER_FLAT_SHAPE


def _region_name(nodes: list[onnx.NodeProto]) -> str:
    return f"{nodes[0].name}..{nodes[-1].name}" if len(nodes) > 1 else nodes[0].name


class _Finder:
    """Grows a region upwards from each first-layer ConvGrad while the ops stay batch-separable."""

    def __init__(self, analysis: GraphAnalysis) -> None:
        self.a = analysis
        self.nodes = analysis.nodes
        self.index = {id(n): i for i, n in enumerate(self.nodes)}

    def batch_of(self, name: str) -> int | None:
        t = self.a.tensors.get(name)
        return t.shape[0] if t is not None and t.shape is not None and len(t.shape) >= 1 else None

    def readers(self, name: str) -> list[onnx.NodeProto]:
        t = self.a.tensors.get(name)
        return [self.nodes[c] for c in t.consumers if not _is_trigger(self.nodes[c])] if t else []

    def op_problem(self, node: onnx.NodeProto, batch: int) -> str | None:
        """Why ``node`` cannot be in a region (None: it can)."""
        if node.op_type not in SEPARABLE or node.name.startswith(PREFIX):
            return f"{node.op_type} is not batch-separable (or not a gradient op a region can hold)"
        if node.op_type in ("ConvGrad", "ReluGrad", "LeakyReluGrad", "BatchNormalizationGrad") and \
                node.domain != MS_DOMAIN:
            return f"{node.op_type} in domain {node.domain!r}"
        names = [node.input[0]] + ([node.input[SEPARABLE[node.op_type]]] if SEPARABLE[node.op_type] else [])
        names += [node.output[0]] if node.output and node.output[0] else []
        for n in names:
            t = self.a.tensors.get(n)
            if t is None or t.shape is None or len(t.shape) != 4 or t.shape[0] != batch:
                return f"{n} has no static NCHW shape with batch {batch}"
        if node.op_type == "MaxPoolGrad" and node_attr(node, "storage_order", 0):
            return "MaxPoolGrad with storage_order=1"
        return None

    def terminals(self) -> list[onnx.NodeProto]:
        out = []
        for i, n in enumerate(self.nodes):
            if n.op_type == "ConvGrad" and n.domain == MS_DOMAIN and not n.name.startswith(PREFIX) and \
                    self.a.boundary.is_backward(i) and not (n.output and n.output[0]) and len(n.output) > 1 \
                    and n.output[1]:
                out.append(n)
        return out

    def chain(self, terminal: onnx.NodeProto) -> tuple[list[onnx.NodeProto], str]:
        """The longest region ending at ``terminal`` (top first) and why it stops growing."""
        batch = self.batch_of(terminal.input[0])
        if batch is None or batch < 2:
            return [], f"its output gradient has no static batch >= 2 (batch {batch})"
        problem = self.op_problem(terminal, batch)
        if problem:
            return [], problem
        chain = [terminal]
        bns = 0
        while True:
            top = chain[0]
            g = top.input[0]
            t = self.a.tensors.get(g)
            if t is None or t.producer is None:
                return chain, f"{g} is a graph input"
            p = self.nodes[t.producer]
            if not self.a.boundary.is_backward(t.producer):
                return chain, f"{g} comes from the forward pass"
            if p.output[0] != g:
                return chain, f"{g} is not {p.name}'s input gradient"
            others = [r for r in self.readers(g) if r is not top]
            if others:
                return chain, f"{g} is also read by {[r.name for r in others][:3]}"
            problem = self.op_problem(p, batch)
            if problem:
                return chain, f"above it: {problem}"
            if p.op_type == "BatchNormalizationGrad":
                if bns:
                    return chain, ("above it: a second BatchNormalizationGrad (two batch couplings would need a "
                                   "third pass)")
                bns += 1
            if p.op_type == "ConvGrad" and len(p.output) > 1 and p.output[1] and \
                    self.a.tensors.get(p.output[1]) is None:
                return chain, f"{p.name}'s weight gradient has no type"
            chain.insert(0, p)

    def recomputable(self, bn: onnx.NodeProto, conv: onnx.NodeProto) -> onnx.NodeProto | None:
        """The forward Conv producing the BN input from the image with the terminal ConvGrad's weight:
        rerunning it on a batch chunk gives that chunk's BN input exactly, so the BN input needs no stash. Seen
        through a native fp16 decode (Cast ← gated Reshape ← Cast ← Clip ← the Conv output)."""
        name, fwd = bn.input[1], None
        for _ in range(6):
            x = self.a.tensors[name]
            if x.producer is None:
                return None
            fwd = self.nodes[x.producer]
            if fwd.op_type not in ("Cast", "Reshape", "Clip", "Identity"):
                break
            name = fwd.input[0]
        if fwd is None or self.a.tensors[fwd.output[0]].shape != self.a.tensors[bn.input[1]].shape:
            return None
        image = self.a.tensors.get(fwd.input[0]) if fwd.input else None
        if fwd.op_type != "Conv" or fwd.domain not in ("", "ai.onnx") or image is None or image.producer is not None:
            return None
        if fwd.input[0] != conv.input[1] or fwd.input[1] != conv.input[2]:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in fwd.attribute}
        return fwd if attrs == {a.name: helper.get_attribute_value(a) for a in conv.attribute} else None


def _raw_stashes(analysis: GraphAnalysis, ops: list[onnx.NodeProto], recomputed: str | None) -> list[str]:
    """Stashes the region would slice as the forward pass left them (not a graph input, not decoded or
    recomputed in backward): an encoder running after this pass could not time a decoder for them."""
    out = []
    for i, node in enumerate(ops):
        k = SEPARABLE[node.op_type]
        if k is None or (node.op_type == "BatchNormalizationGrad" and recomputed is not None):
            continue
        name = node.input[k]
        if i == len(ops) - 1 and recomputed is not None:
            continue          # the image: read by the recomputing Conv as well
        t = analysis.tensors[name]
        if t.producer is not None and not analysis.boundary.is_backward(t.producer):
            out.append(name)
    return out


def _regions(analysis: GraphAnalysis, max_ops: int | None = None, lengths: bool = True,
             raw_stashes: bool = True) -> tuple[list[Region], list[Skipped]]:
    """Candidate regions (several lengths per terminal, longest last) and the terminals refused.
    raw_stashes False: only regions that slice no stash as the forward pass left it (see _raw_stashes)."""
    finder = _Finder(analysis)
    found: list[Region] = []
    skipped: list[Skipped] = []
    for term in finder.terminals():
        chain, why = finder.chain(term)
        if max_ops is not None:
            chain = chain[-max_ops:]
        if len(chain) < 2:
            skipped.append(Skipped(term.name, PATTERN, f"nothing to chunk: {why}" if why else "nothing to chunk"))
            continue
        sizes = sorted({n for n in _LENGTHS if n < len(chain)} | {len(chain)}) if lengths else [len(chain)]
        for m in sizes:
            ops = chain[-m:]
            if ops[0].op_type == "BatchNormalizationGrad" and m < len(chain) and \
                    chain[-m - 1].op_type == "ReluGrad":
                continue   # a BN region takes the ReluGrad above it along (it is free: sliced, not stashed)
            bn = next((n for n in ops if n.op_type == "BatchNormalizationGrad"), None)
            rec = None
            if bn is not None and ops[-2] is bn:
                fwd = finder.recomputable(bn, ops[-1])
                rec = fwd.output[0] if fwd is not None else None
            if not raw_stashes and _raw_stashes(analysis, ops, rec):
                continue
            found.append(Region(_region_name(ops), tuple(n.name for n in ops), ops[0].input[0],
                                finder.batch_of(term.input[0]) or 0, tuple(n.op_type for n in ops),
                                bn.name if bn is not None else None, rec))
    return found, skipped


def _spans(n: int, k: int) -> list[tuple[int, int]]:
    bounds = even_bounds(n, k)
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


# ------------------------------------------------------------------------------------------ planning API

def chunkable_regions(model: onnx.ModelProto, chunks: tuple[int, ...] = DEFAULT_CHUNKS,
                      predict: bool = True) -> list[Region]:
    """Every backward region of ``model`` that can run in batch chunks (several lengths per first-layer
    ConvGrad), with the predicted step peak per chunk count when ``predict`` (one trial rewrite each)."""
    require_training_graph(model)
    regions, _ = _regions(analyze_model(model))
    if predict and regions:
        from ..planner.predict import predicted_peak

        before = predicted_peak(model)
        for r in regions:
            r.predicted_peak_before = before
            for k in chunks:
                if 2 <= k <= r.batch:
                    r.predicted_peak[k] = predicted_peak(rewrite_region(model, r.name, k))
    return regions


def rewrite_region(model: onnx.ModelProto, region: str, chunks: int) -> onnx.ModelProto:
    """A copy of ``model`` with the named region (a ``Region.name`` from chunkable_regions) run in ``chunks``
    batch chunks."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    analysis = analyze_model(out)
    regions, _ = _regions(analysis)
    match = next((r for r in regions if r.name == region), None)
    if match is None:
        raise OnnxcompError(f"chunk_backward: no chunkable region {region!r} in this graph; "
                            f"candidates: {[r.name for r in regions]}")
    if chunks < 2 or chunks > match.batch:
        raise OnnxcompError(f"chunk_backward: {chunks} chunks for region {region!r} of batch {match.batch}; "
                            f"use 2..{match.batch}")
    _ChunkedChain(out, analysis, match, chunks).emit()
    return out


class ChunkedBackwardPass(GraphPass):
    """chunks: candidate chunk counts (the planner picks). regions: only these region names (from
    chunkable_regions; a terminal's name selects its regions of every length); default: all. force:
    rewrite the longest (selected) region of every terminal with the first count, without asking the
    planner (tests, measurements). max_ops: cap on the region length. raw_stashes: allow regions that slice
    stashes as the forward pass left them (False in policies whose encoders run after this pass)."""

    name = "chunk_backward"

    def __init__(self, chunks: tuple[int, ...] | int = DEFAULT_CHUNKS, force: bool = False,
                 regions: list[str] | tuple[str, ...] | None = None, max_ops: int | None = None,
                 raw_stashes: bool = True) -> None:
        counts = (chunks,) if isinstance(chunks, int) else tuple(chunks)
        if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 2 for c in counts):
            raise OnnxcompError(f"{type(self).__name__} chunks must be integers >= 2 (got {chunks!r})")
        if max_ops is not None and max_ops < 2:
            raise OnnxcompError(f"{type(self).__name__} max_ops must be >= 2 (got {max_ops!r})")
        self.chunks = counts
        self.force = force
        self.regions = None if regions is None else tuple(regions)
        self.max_ops = max_ops
        # False where encoders run after this pass: a region's Slice hides a raw stash from them (an encoder
        # times its decoder by the incoming gradient of the stash's first backward reader; a Slice has none).
        self.raw_stashes = bool(raw_stashes)

    def candidates(self, analysis: GraphAnalysis) -> tuple[list[Region], list[Skipped]]:
        regions, skipped = _regions(analysis, self.max_ops, raw_stashes=self.raw_stashes)
        if self.regions is None and self.force:     # the longest region of each terminal
            regions = [r for r in regions if r is [q for q in regions if q.terminal == r.terminal][-1]]
        if self.regions is not None:
            known = {r.name for r in regions} | {r.terminal for r in regions}
            missing = [n for n in self.regions if n not in known]
            if missing:
                raise OnnxcompError(f"{self.name}: no chunkable region named {missing}; candidates: "
                                    f"{sorted({r.name for r in regions})}")
            regions = [r for r in regions if r.name in self.regions or r.terminal in self.regions]
        return regions, skipped

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        result = PassResult(self.copy(model))
        regions, skipped = self.candidates(analyze_model(result.model))
        result.skipped.extend(skipped)
        if not regions:
            return result
        from ..planner.predict import live_at, predicted_live

        current = result.model
        for term in dict.fromkeys(r.terminal for r in regions):
            options = [r for r in regions if r.terminal == term]
            batch = options[0].batch
            counts = [k for k in self.chunks if k <= batch]
            if not counts:
                result.skipped.append(Skipped(term, PATTERN, f"batch {batch} is smaller than every chunk "
                                              f"count {self.chunks}"))
                continue
            if self.force:
                region = options[-1]
                current = self._rewrite(current, region, counts[0])
                result.records.append(self._record(region, counts[0]))
                continue
            seen, live = predicted_live(current)
            peak_before = int(live.max())

            def trial(region: Region, k: int) -> tuple:
                before = live_at(seen, live, lambda nd: nd.name in region.nodes)
                rewritten = self._rewrite(current, region, k)
                seen_t, live_t = predicted_live(rewritten)
                at = live_at(seen_t, live_t, lambda nd: nd.name.startswith(_prefix(region)))
                return int(live_t.max()), at, k, len(region.nodes), region, rewritten, before

            # Two stages (lengths x counts trial rewrites would be slow on deep nets): every region length at
            # the most chunks, then the other counts for the best length.
            def lowers(t: tuple) -> bool:   # fewer bytes at the region, no higher step peak
                return t[1] < t[6] and t[0] <= peak_before

            key = lambda t: (t[0], t[1], t[2], t[3])  # noqa: E731
            trials = [trial(region, max(counts)) for region in options]
            best_region = min([t for t in trials if lowers(t)] or trials, key=key)[4]
            trials += [trial(best_region, k) for k in counts if k != max(counts)]
            good = [t for t in trials if lowers(t)]
            if not good:
                best = min(trials, key=lambda t: (t[0], t[1]))
                result.skipped.append(Skipped(term, PATTERN, f"batch chunks would not lower the predicted bytes "
                                              f"({best[6] / 2**20:.1f} -> {best[1] / 2**20:.1f} MiB at the region, "
                                              f"{peak_before / 2**20:.1f} -> {best[0] / 2**20:.1f} MiB at the peak)"))
                continue
            # Lowest predicted peak, then lowest bytes at the region, then fewer chunks and fewer ops (cheaper).
            peak_after, at, k, _, region, rewritten, before = min(good, key=key)
            current = rewritten
            result.records.append(self._record(region, k, region_before=before, region_after=at,
                                               predicted_peak_before=peak_before, predicted_peak_after=peak_after))
        if result.records:
            check_model(current, f"{self.name} pass")
        result.model = current
        return result

    def _rewrite(self, model: onnx.ModelProto, region: Region, k: int) -> onnx.ModelProto:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        analysis = analyze_model(out)
        regions, _ = _regions(analysis, self.max_ops)
        match = next(r for r in regions if r.name == region.name)
        _ChunkedChain(out, analysis, match, k).emit()
        return out

    def _record(self, region: Region, chunks: int, **predicted: int) -> PassRecord:
        dropped = [region.recomputed_input] if region.recomputed_input else []
        return PassRecord("chunked", self.name, region.name, {
            "site": region.batchnorm or region.terminal, "region": region.name, "nodes": list(region.nodes),
            "conv_grad": region.terminal, "batchnorm": region.batchnorm, "chunks": chunks,
            "relu_grad": next((n for n, t in zip(region.nodes, region.op_types) if t == "ReluGrad"), None),
            "dropped_stashes": dropped, "exact": region.exact, **predicted, "pass": self.name}, tuple(dropped))


def _prefix(region: Region) -> str:
    return f"{PREFIX}_{region.grad_input.replace('/', '_').strip('_')}"


# ------------------------------------------------------------------------------------------ emission

class _ChunkedChain:
    """The replacement of one region, built chunk by chunk:

    1. pass A (only with a BatchNorm): the ops above the BN per chunk (their weight gradients summed), then
       Σg and Σg·(x − μ) at the BN;
    2. the BN coefficients dX = a·g + b·(x − μ) + c and BN's dScale/dBias outputs (accumulators moved behind);
    3. pass B: per chunk, the ops above the BN again (input gradients only), the BN's dX, the ops below it
       with their weight gradients summed (without a BN: every op, once);
    4. splice: the new nodes replace the region in the node list; a stable topological sort keeps the rest.
    """

    def __init__(self, model: onnx.ModelProto, analysis: GraphAnalysis, region: Region, k: int) -> None:
        self.model, self.graph, self.analysis, self.region = model, model.graph, analysis, region
        by_name = {n.name: n for n in self.graph.node}
        self.ops = [by_name[n] for n in region.nodes]
        self.nodes = list(self.graph.node)
        self.taken = taken_names(self.graph)
        self.b = GraphEditor(self.graph, self.taken, _prefix(region))
        self.n = region.batch
        self.spans = _spans(self.n, k)
        self.bn_at = next((i for i, n in enumerate(self.ops) if n.op_type == "BatchNormalizationGrad"), None)
        self.recompute = None
        if region.recomputed_input is not None:
            self.recompute = self.nodes[analysis.tensors[region.recomputed_input].producer]
        self.grad_in = region.grad_input
        self.grad_elem = self.elem_of(self.grad_in)
        self.axis0 = self.b.const("axis0", TensorProto.INT64, [0])
        self.bounds: dict[tuple[int, int, str | None], tuple[str, str]] = {}
        self.slices: dict[tuple[str, int, int, str | None], str] = {}
        self.sums: dict[str, str] = {}                 # original parameter-gradient name -> running sum
        self.acc_at = 0

    # -- reading chunks ----------------------------------------------------------------------------------
    def elem_of(self, name: str) -> int:
        return helper.np_dtype_to_tensor_dtype(self.analysis.tensors[name].type.dtype)

    def shape_of(self, name: str) -> list[int]:
        return list(self.analysis.tensors[name].shape)

    def source(self, name: str) -> tuple[str, int | None]:
        """Where to slice ``name``: the input of the Cast producing it (sliced, then cast) or itself, so a
        full-precision decode is never materialised."""
        t = self.analysis.tensors[name]
        if t.producer is not None:
            p = self.nodes[t.producer]
            if p.op_type == "Cast" and self.analysis.tensors[p.input[0]].shape == t.shape:
                return p.input[0], node_attr(p, "to", TensorProto.FLOAT)
        return name, None

    def chunk(self, name: str, lo: int, hi: int, gate: str | None) -> str:
        """Samples [lo, hi) of ``name``; the slice waits for ``gate``."""
        key = (name, lo, hi, gate)
        if key in self.slices:
            return self.slices[key]
        b = self.b
        src, cast_to = self.source(name)
        if (lo, hi, gate) not in self.bounds:
            start, end = b.const(f"start{lo}", TensorProto.INT64, [lo]), b.const(f"end{hi}", TensorProto.INT64, [hi])
            if gate is not None:
                start = b.op("Add", [start, gate], "start", TensorProto.INT64, [1])
                end = b.op("Add", [end, gate], "end", TensorProto.INT64, [1])
            self.bounds[(lo, hi, gate)] = (start, end)
        start, end = self.bounds[(lo, hi, gate)]
        shape = [hi - lo, *self.shape_of(name)[1:]]
        base = name.rsplit("/", 1)[-1] or "t"
        out = b.op("Slice", [src, start, end, self.axis0], f"{base}_rows", self.elem_of(src), shape)
        if cast_to is not None:
            out = b.op("Cast", [out], f"{base}_cast", cast_to, shape, to=cast_to)
        self.slices[key] = out
        return out

    # -- one op on one chunk -----------------------------------------------------------------------------
    def op(self, i: int, g: str, lo: int, hi: int, gate: str | None, params: bool) -> str:
        """Op ``i`` of the region on samples [lo, hi) given its output gradient's chunk ``g``; returns the
        chunk of its input gradient ("" at the terminal). ``params``: also its weight gradients (summed)."""
        b, node = self.b, self.ops[i]
        F = TensorProto.FLOAT
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        last = i == len(self.ops) - 1
        out_shape = [hi - lo, *self.shape_of(node.output[0])[1:]] if node.output[0] else None
        kind = node.op_type
        if kind == "ConvGrad":
            x = self.chunk(node.input[1], lo, hi, gate)   # at a recomputed stem: the image chunk, shared
            dx = "" if last else b.tensor("dx", F, out_shape)
            outs = [dx, "", ""]
            for j in (1, 2):
                if params and len(node.output) > j and node.output[j]:
                    outs[j] = b.tensor("d_w_part" if j == 1 else "d_b_part", F, self.shape_of(node.output[j]))
            b.node("ConvGrad", [g, x, node.input[2]], outs, name=unique_name(f"{b.prefix}_conv_grad", self.taken),
                   domain=node.domain, **attrs)
            for j in (1, 2):
                if outs[j]:
                    self.add_to_sum(node.output[j], outs[j], "d_w" if j == 1 else "d_b")
            return dx
        if kind in ("ReluGrad", "LeakyReluGrad"):
            x = self.chunk(node.input[1], lo, hi, gate)
            return b.op(kind, [g, x], kind.lower(), F, out_shape, domain=node.domain, **attrs)
        if kind == "MaxPoolGrad":
            idx = self.chunk(node.input[1], lo, hi, gate)
            if lo:
                per_sample = int(np.prod(self.shape_of(node.output[0])[1:], dtype=np.int64))
                offset = b.const(f"index_offset{lo}", TensorProto.INT64, [lo * per_sample], dims=[])
                idx = b.op("Sub", [idx, offset], "indices_rebased", TensorProto.INT64,
                           [hi - lo, *self.shape_of(node.input[1])[1:]])
            return b.op(kind, [g, idx], "max_pool_grad", F, out_shape, domain=node.domain, **attrs)
        if kind == "AveragePoolGrad":
            return b.op(kind, [g], "average_pool_grad", F, out_shape, domain=node.domain, **attrs)
        raise OnnxcompError(f"chunk_backward: {kind} cannot run in batch chunks (internal error)")

    def add_to_sum(self, original: str, part: str, base: str) -> None:
        """Running sum over chunks of a weight (or bias) gradient: one part alive at a time."""
        if original not in self.sums:
            self.sums[original] = part
            return
        self.sums[original] = self.b.op("Add", [self.sums[original], part], base, TensorProto.FLOAT,
                                        self.shape_of(original))

    def chunk_gate(self, extra: list[str] = ()) -> str:
        """A zero that exists once every running sum (and ``extra``) of the chunk just emitted does: no
        pending reduction under ORT's DEFAULT order holds its chunk."""
        after = [(s, TensorProto.FLOAT) for s in list(self.sums.values()) + list(extra)]
        return self.b.zero_after(after)

    def x_chunk(self, lo: int, hi: int, gate: str | None) -> str:
        """The BN input's chunk: sliced, or rebuilt from the image chunk by the stem's forward Conv."""
        bn = self.ops[self.bn_at]
        if self.recompute is None:
            return self.chunk(bn.input[1], lo, hi, gate)
        img = self.chunk(self.recompute.input[0], lo, hi, gate)
        return self.b.op("Conv", [img, *self.recompute.input[1:]], "x_recomputed", TensorProto.FLOAT,
                         [hi - lo, *self.shape_of(bn.input[1])[1:]],
                         **{a.name: helper.get_attribute_value(a) for a in self.recompute.attribute})

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
        self.splice()

    def single_pass(self) -> None:
        gate = self.b.zero_after(self.grad_in, self.grad_elem)
        for lo, hi in self.spans:
            g = self.chunk(self.grad_in, lo, hi, gate)
            for i in range(len(self.ops)):
                g = self.op(i, g, lo, hi, gate, params=True)
            gate = self.chunk_gate()

    def statistics_pass(self) -> None:
        """Pass A: the ops above the BN (with their weight gradients), Σg and Σg·(x − μ) per channel."""
        b, F = self.b, TensorProto.FLOAT
        bn = self.ops[self.bn_at]
        n, c, h, w = self.shape_of(bn.input[1])
        self.c, self.hw = c, h * w
        self.chan = [1, c, 1, 1]
        shape_c11 = b.const("c11", TensorProto.INT64, [1, c, 1, 1])
        axes = b.const("axes", TensorProto.INT64, [0, 2, 3])
        sum_g = sum_gx = None
        gate = b.zero_after(self.grad_in, self.grad_elem)
        for lo, hi in self.spans:
            shp = [hi - lo, c, h, w]
            g = self.chunk(self.grad_in, lo, hi, gate)
            for i in range(self.bn_at):
                g = self.op(i, g, lo, hi, gate, params=True)
            x = self.x_chunk(lo, hi, gate)
            if sum_g is None:   # after the first slices, so that decoders stay right before their readers
                gated_c11 = b.op("Add", [shape_c11, gate], "c11_gated", TensorProto.INT64, [4])
                self.mean4 = b.op("Reshape", [bn.input[3], gated_c11], "mean", F, self.chan)
                self.inv4 = b.op("Reshape", [bn.input[4], gated_c11], "inv_std", F, self.chan)
                self.scale4 = b.op("Reshape", [bn.input[2], gated_c11], "scale", F, self.chan)
            xc = b.op("Sub", [x, self.mean4], "x_centred", F, shp)
            gx = b.op("Mul", [g, xc], "g_x", F, shp)
            sg = b.op("ReduceSum", [g, axes], "sum_g_part", F, self.chan, keepdims=1)
            sgx = b.op("ReduceSum", [gx, axes], "sum_gx_part", F, self.chan, keepdims=1)
            sum_g = sg if sum_g is None else b.op("Add", [sum_g, sg], "sum_g", F, self.chan)
            sum_gx = sgx if sum_gx is None else b.op("Add", [sum_gx, sgx], "sum_gx", F, self.chan)
            gate = self.chunk_gate([sum_g, sum_gx])
        self.sum_g, self.sum_gx = sum_g, sum_gx

    def coefficients(self) -> None:
        """dX = a·g + b·(x − μ) + c with a = γ·inv_std, b = −a·inv_std·dScale/N, c = −a·Σg/N (training-mode
        BN, N = batch·H·W)."""
        b, F, chan = self.b, TensorProto.FLOAT, self.chan
        inv_count = unique_name(f"{b.prefix}_inv_count", self.taken)
        self.graph.initializer.append(helper.make_tensor(inv_count, F, [], [1.0 / float(self.n * self.hw)]))
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
        outs = list(bn.output) + [""] * 3
        shape_c = b.const("c", TensorProto.INT64, [self.c])
        if outs[1]:
            b.node("Reshape", [self.d_scale4, shape_c], [outs[1]], name=unique_name(f"{b.prefix}_d_scale__reshape", self.taken))
        if outs[2]:
            b.node("Reshape", [self.sum_g, shape_c], [outs[2]], name=unique_name(f"{b.prefix}_d_bias__reshape", self.taken))
        self.finish_parameters()
        self.acc_at = len(b.nodes)

    def dx_pass(self) -> None:
        """Pass B: the ops above the BN again (input gradients only), dX per chunk, the ops below it."""
        b, F = self.b, TensorProto.FLOAT
        bn = self.ops[self.bn_at]
        gate = b.zero_after(self.coef_c, F)
        for lo, hi in self.spans:
            shp = [hi - lo, *self.shape_of(bn.input[1])[1:]]
            g = self.chunk(self.grad_in, lo, hi, gate)
            for i in range(self.bn_at):
                g = self.op(i, g, lo, hi, gate, params=False)
            x = self.x_chunk(lo, hi, gate)
            xc = b.op("Sub", [x, self.mean4], "x_centred", F, shp)
            ga = b.op("Mul", [g, self.coef_a], "dx_a", F, shp)
            xb = b.op("Mul", [xc, self.coef_b], "dx_b", F, shp)
            s = b.op("Add", [ga, xb], "dx_ab", F, shp)
            g = b.op("Add", [s, self.coef_c], "dx", F, shp)
            for i in range(self.bn_at + 1, len(self.ops)):
                g = self.op(i, g, lo, hi, gate, params=True)
            gate = self.chunk_gate()

    def finish_parameters(self) -> None:
        """Each running sum under the name the optimizer's accumulator reads (once per sum)."""
        for original, total in list(self.sums.items()):
            if total is None:
                continue
            self.b.node("Identity", [total], [original], name=unique_name(f"{self.b.prefix}_grad_out", self.taken))
            self.sums[original] = None   # type: ignore[assignment]
        self.sums = {k: v for k, v in self.sums.items() if v is not None}

    def splice(self) -> None:
        """Replace the region by the new nodes: timing reads rewired, accumulators of gradients completed in
        pass A moved in, dead decode Casts dropped, decoders right before their first slice, then a stable
        topological sort."""
        from .eager_accumulation import ACCUMULATORS
        from .row_split import _stable_toposort

        b, graph, nodes = self.b, self.graph, self.nodes
        removed = list(self.ops)
        new_outputs = {o for nd in b.nodes for o in nd.output}
        removed_outputs = {o for nd in removed for o in nd.output if o} - new_outputs
        for nd in nodes:
            if any(nd is r for r in removed):
                continue
            for i, name in enumerate(nd.input):
                if name in removed_outputs:
                    if not _is_trigger(nd) or self.elem_of(name) != self.grad_elem:
                        raise OnnxcompError(f"chunk_backward: {nd.name} reads {name} (internal error)")
                    nd.input[i] = self.grad_in
        if self.acc_at:
            done_early = {o for nd in b.nodes[:self.acc_at] for o in nd.output if o}
            early = [nd for nd in nodes if nd.op_type in ACCUMULATORS and len(nd.input) > 1 and nd.input[1] in done_early]
            b.nodes[self.acc_at:self.acc_at] = early
            removed += early
        pos = next(i for i, nd in enumerate(nodes) if nd is self.ops[0])
        pos = sum(1 for nd in nodes[:pos] if not any(nd is r for r in removed))
        kept = [nd for nd in nodes if not any(nd is r for r in removed)]
        new_nodes = _drop_dead(kept[:pos] + b.nodes + kept[pos:], graph)
        # A decoder of a sliced source runs right before its first slice (PRIORITY_BASED order follows the list).
        # Only backward producers move: a forward encoder (native fp16's Cast) must stay in the forward pass,
        # or the full-precision tensor it encodes would live until backward.
        backward = {id(self.nodes[i]) for i in self.analysis.boundary.backward}
        for src in dict.fromkeys(self.source(name)[0] for name, *_ in self.slices):
            k = next((i for i, nd in enumerate(new_nodes) if src in nd.output), None)
            if k is None or id(new_nodes[k]) not in backward:
                continue
            first = next(i for i, nd in enumerate(new_nodes) if src in nd.input)
            if first > k + 1:
                new_nodes.insert(first - 1, new_nodes.pop(k))
        available = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        new_nodes = _stable_toposort(new_nodes, available)
        del graph.node[:]
        graph.node.extend(new_nodes)
        stale = removed_outputs - {o for nd in new_nodes for o in nd.output}
        keep_vi = [v for v in graph.value_info if v.name not in stale]
        del graph.value_info[:]
        graph.value_info.extend(keep_vi + b.infos)


# Side-effect-free ops a region can leave unread: full-size decode Casts and their gated views.
_PURE = {"Cast", "Reshape", "Identity", "Slice", "Less", "Add", "Flatten"}


def _drop_dead(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Pure nodes whose outputs nobody reads (the decodes, and their gates, this region no longer needs)."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for nd in nodes for i in nd.input} | outputs
        dead = [nd for nd in nodes if nd.op_type in _PURE and nd.domain in ("", "ai.onnx")
                and not any(o in read for o in nd.output if o)]
        if not dead:
            return nodes
        nodes = [nd for nd in nodes if not any(nd is d for d in dead)]
