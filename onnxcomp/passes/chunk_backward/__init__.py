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
(``IrGraphEditor.zero_after``), so under both ORT execution orders one chunk's temporaries are alive at a
time. The planner (planner/predict.py) picks the region length and chunk count; a rewrite is kept only
where it lowers the predicted bytes at the region and does not raise the predicted step peak.

``chunkable_regions(model)`` lists the candidates (for the budget planner); ``ChunkedBackwardPass(regions=
[names], chunks=...)`` rewrites a chosen subset.

Layout: ``regions.py`` finds the regions (reads the cached analysis), ``emission.py`` rewrites one region
on the onnx-ir graph (IrGraphEditor, use/def links) and splices it in, this module tries rewrites against
the planner (each on a clone of the graph) and keeps the best.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir

from ...analysis import GraphAnalysis, analysis_of
from ...analysis.cached import invalidate
from ...errors import OnnxcompError
from ..base import OnnxcompPass, PassOutcome, Skipped, require_training_graph
from ..records import PassRecord
from .emission import rewrite_in_place, spans  # noqa: F401  (re-export)
from .regions import (MS_DOMAIN, PATTERN, PREFIX, SEPARABLE, TRIGGER_FLAT_SHAPE, Region,  # noqa: F401
                      find_regions, prefix_of)

DEFAULT_CHUNKS = (2, 4, 8)


# ------------------------------------------------------------------------------------------ planning API

def chunkable_regions(model: onnx.ModelProto, chunks: tuple[int, ...] = DEFAULT_CHUNKS,
                      predict: bool = True) -> list[Region]:
    """Every backward region of ``model`` that can run in batch chunks (several lengths per first-layer
    ConvGrad), with the predicted step peak per chunk count when ``predict`` (one trial rewrite each, on a
    clone of the graph)."""
    require_training_graph(model)
    analysis = analysis_of(model)
    regions, _ = find_regions(analysis)
    if predict and regions:
        from ...planner.predict import predicted_peak

        before = predicted_peak(model)
        loaded = ir.serde.deserialize_model(model)
        for r in regions:
            r.predicted_peak_before = before
            for k in chunks:
                if 2 <= k <= r.batch:
                    trial = loaded.clone()
                    rewrite_in_place(trial, analysis, r, k)
                    r.predicted_peak[k] = predicted_peak(trial)
    return regions


def rewrite_region(model: onnx.ModelProto, region: str, chunks: int) -> onnx.ModelProto:
    """A copy of ``model`` with the named region (a ``Region.name`` from chunkable_regions) run in ``chunks``
    batch chunks."""
    analysis = analysis_of(model)
    regions, _ = find_regions(analysis)
    match = next((r for r in regions if r.name == region), None)
    if match is None:
        raise OnnxcompError(f"chunk_backward: no chunkable region {region!r} in this graph; "
                            f"candidates: {[r.name for r in regions]}")
    if chunks < 2 or chunks > match.batch:
        raise OnnxcompError(f"chunk_backward: {chunks} chunks for region {region!r} of batch {match.batch}; "
                            f"use 2..{match.batch}")
    loaded = ir.serde.deserialize_model(model)
    rewrite_in_place(loaded, analysis, match, chunks)
    return ir.serde.serialize_model(loaded)


# ------------------------------------------------------------------------------------------ trials

class _Current:
    """The graph as accepted so far (the pass's model, or an accepted trial's clone), with its analysis made
    when first asked for."""

    def __init__(self, model: ir.Model, analysis: GraphAnalysis | None = None) -> None:
        self.model, self._analysis = model, analysis

    @property
    def analysis(self) -> GraphAnalysis:
        if self._analysis is None:
            self._analysis = analysis_of(self.model)   # a trial's: already made when it was predicted
        return self._analysis

    def changed(self) -> None:
        """The graph was edited in place: the analysis is stale."""
        self._analysis = None
        invalidate(self.model)


@dataclass
class _Trial:
    """One region rewritten with ``chunks`` chunks on a clone, and what the planner predicts for it."""
    region: Region
    chunks: int
    model: ir.Model
    peak: int              # predicted step peak after the rewrite
    at: int                # predicted bytes at the region's new nodes
    before: int            # predicted bytes at the region's nodes before the rewrite
    peak_before: int       # predicted step peak before the rewrite

    def lowers(self) -> bool:
        """Fewer bytes at the region, no higher step peak."""
        return self.at < self.before and self.peak <= self.peak_before

    def key(self) -> tuple[int, int, int, int]:
        """Lowest predicted peak, then lowest bytes at the region, then fewer chunks and fewer ops (cheaper)."""
        return self.peak, self.at, self.chunks, len(self.region.nodes)


def _try(current: _Current, region: Region, chunks: int, max_ops: int | None, seen: ir.Model,
         live: np.ndarray) -> _Trial:
    """Rewrite ``region`` on a clone of the current graph and predict the result."""
    from ...planner.predict import live_at, predicted_live

    before = live_at(seen, live, lambda nd: (nd.name or "") in region.nodes)
    trial = current.model.clone()
    rewrite_in_place(trial, current.analysis, _refind(current.analysis, region, max_ops), chunks)
    seen_t, live_t = predicted_live(trial)
    prefix = prefix_of(region)
    at = live_at(seen_t, live_t, lambda nd: (nd.name or "").startswith(prefix))
    return _Trial(region, chunks, trial, int(live_t.max()), at, before, int(live.max()))


def _best_trial(current: _Current, options: list[Region], counts: list[int],
                max_ops: int | None) -> tuple[_Trial | None, str]:
    """The best rewrite of one terminal's regions, or None and why none lowers the prediction. Two stages
    (lengths x counts trial rewrites would be slow on deep nets): every region length at the most chunks,
    then the other counts for the best length."""
    from ...planner.predict import predicted_live

    seen, live = predicted_live(current.model)
    trials = [_try(current, region, max(counts), max_ops, seen, live) for region in options]
    best_region = min([t for t in trials if t.lowers()] or trials, key=_Trial.key).region
    trials += [_try(current, best_region, k, max_ops, seen, live) for k in counts if k != max(counts)]
    good = [t for t in trials if t.lowers()]
    if good:
        return min(good, key=_Trial.key), ""
    best = min(trials, key=lambda t: (t.peak, t.at))
    return None, (f"batch chunks would not lower the predicted bytes ({best.before / 2**20:.1f} -> "
                  f"{best.at / 2**20:.1f} MiB at the region, {best.peak_before / 2**20:.1f} -> "
                  f"{best.peak / 2**20:.1f} MiB at the peak)")


def _refind(analysis: GraphAnalysis, region: Region, max_ops: int | None) -> Region:
    """``region`` as the analysis of the graph it is about to be rewritten in finds it."""
    regions, _ = find_regions(analysis, max_ops)
    return next(r for r in regions if r.name == region.name)


# ------------------------------------------------------------------------------------------ the pass

class ChunkedBackwardPass(OnnxcompPass):
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
        regions, skipped = find_regions(analysis, self.max_ops, raw_stashes=self.raw_stashes)
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

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        analysis = analysis_of(model)
        regions, skipped = self.candidates(analysis)
        outcome.skipped.extend(skipped)
        current = _Current(model, analysis)
        for term in dict.fromkeys(r.terminal for r in regions):
            options = [r for r in regions if r.terminal == term]
            counts = [k for k in self.chunks if k <= options[0].batch]
            if not counts:
                outcome.skipped.append(Skipped(term, PATTERN, f"batch {options[0].batch} is smaller than every "
                                               f"chunk count {self.chunks}"))
            elif self.force:
                current = self._rewrite_forced(current, options[-1], counts[0], outcome)
            else:
                current = self._rewrite_planned(current, term, options, counts, outcome)
        if current.model is not model:
            model.graph = current.model.graph     # the accepted trial's graph (the model object stays: in place)
        outcome.modified = bool(outcome.records)
        return outcome

    def _rewrite_forced(self, current: _Current, region: Region, chunks: int, outcome: PassOutcome) -> _Current:
        """``region`` rewritten in the graph itself, without asking the planner."""
        rewrite_in_place(current.model, current.analysis, _refind(current.analysis, region, self.max_ops), chunks)
        current.changed()
        outcome.records.append(self._record(region, chunks))
        return current

    def _rewrite_planned(self, current: _Current, terminal: str, options: list[Region], counts: list[int],
                         outcome: PassOutcome) -> _Current:
        """The terminal's best trial, if the planner predicts it lowers the bytes there and not the peak."""
        best, why = _best_trial(current, options, counts, self.max_ops)
        if best is None:
            outcome.skipped.append(Skipped(terminal, PATTERN, why))
            return current
        outcome.records.append(self._record(best.region, best.chunks, region_before=best.before,
                                            region_after=best.at, predicted_peak_before=best.peak_before,
                                            predicted_peak_after=best.peak))
        return _Current(best.model)

    def _record(self, region: Region, chunks: int, **predicted: int) -> PassRecord:
        dropped = [region.recomputed_input] if region.recomputed_input else []
        return PassRecord("chunked", self.name, region.name, {
            "site": region.batchnorm or region.terminal, "region": region.name, "nodes": list(region.nodes),
            "conv_grad": region.terminal, "batchnorm": region.batchnorm, "chunks": chunks,
            "relu_grad": next((n for n, t in zip(region.nodes, region.op_types) if t == "ReluGrad"), None),
            "dropped_stashes": dropped, "exact": region.exact, **predicted, "pass": self.name}, tuple(dropped))
