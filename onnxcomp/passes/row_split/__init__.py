"""Row-centric convolution (LR-CNN, OverL / 2PS and their checkpoint hybrids) on an ORT training graph.

What the pass does to a chain of forward ops ``Conv -> Relu|LeakyRelu -> MaxPool|AveragePool -> Conv ...``
(each intermediate tensor read by exactly one forward op; BatchNorm, residual Adds, concatenations and
everything else end a chain):

* The forward pass is left as it is (default), but the chain's intermediates are no longer read in backward,
  so they die right after their forward consumer. Only the chain input (and, for the hybrids, segment
  inputs: checkpoints) stays stashed. ``split_forward=True`` also runs the forward row by row (LR-CNN's FP:
  per-block rows, one Concat per segment output); measured, it cuts the forward's own peak (VGG-16 512x512:
  34 vs 128 MiB) but the training-step peak came out 5-25 MiB *higher* than with the unsplit forward, so
  it is off by default (cause not found yet).
* The chain's backward nodes (ConvGrad, ReluGrad, LeakyReluGrad, MaxPoolGrad, AveragePoolGrad) are replaced,
  for row blocks r = 1..R along the height axis, by: slice the rows of the checkpoint that block r's
  receptive field needs (its halo), recompute the chain forward on that slice with *semi-closed padding*
  (a clone keeps its real top/bottom padding only where the block touches the true image border, so the
  recomputed rows are exactly the original rows), then run clones of the original backward ops on the
  block's rows. Weight/bias gradients of every block go straight into the optimizer's gradient buffer
  (a chain of InPlaceAccumulatorV2 whose first link honours lazy_reset_grad; no running sum lives across
  blocks) or, where no sole accumulator reads them, into a running Add. The chain input's gradient is
  assembled from per-block pieces by overlap-add and one Concat.
* OverL: blocks are independent; halos overlap and are recomputed; each block back-propagates its own
  output rows' gradient through its own sub-network. Exact by linearity of backprop.
* 2PS: each row of each layer is computed once: a block keeps the rows the next block needs (forward
  halo rows and the rows its backward windows reach) and the next block concatenates them in front of
  its new rows; partial input gradients of boundary rows are carried to the next block and added there, so
  backward also touches each row once (MaxPool indices are the one exception: they are recomputed by a
  cheap MaxPool over the backward window, because the forward window of that block differs).
* Ordering: block 1's slices take a zero derived from one element of the chain output's gradient dY (ORT
  cannot fold it), and block r+1's from block r's last backward result (and its kept rows), so under both
  ORT execution orders only one block's intermediates are alive at a time.
* Hybrids (checkpoints): a chain is cut into segments whose inputs stay stashed; ``checkpoints="auto"``
  picks the cut that minimises a predicted per-block peak plus checkpoint bytes, an int N cuts N segments.
* ``rows="auto"`` with ``budget_bytes``: the smallest R whose rewritten graph's predicted training-step
  peak fits the budget (LR-CNN §III-C), predicted by the planner (``planner.predict.predicted_peak``) on a
  trial graph: the planner's lower bound on the analysed graph plus ConvGrad's im2col workspace (within
  1 MiB of the measured VGG-16 512x512 baseline; for row-split graphs it misses 10-25% of ORT overheads, so
  plan with a margin).

The pass is an onnx-ir pass: chains are found on the cached analysis and the graph's use/def links
(``chains``), cut into segments (``schedule``), and each segment's row-by-row backward is written with the
graph editor (``emission``); trials (``rows="auto"``, ``only_lowering``, ``row_split_candidates``) rewrite a
clone of the graph and ask the planner for its predicted peak.

Row-split and row-merge are standard ONNX ops here (Slice, Pad, Add, Concat): they are memcpy-bound, ORT's
CPU kernels for them are as fast as a custom op would be, and a PyOp would add the bridge's copy of every
input (platform notes) plus a Python call per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir

from ...analysis import GraphAnalysis, analysis_of
from ...errors import OnnxcompError
from ...planner.predict import predicted_peak
from ...planner.heap_term import graph_heap_term
from ..base import OnnxcompPass, PassOutcome, Skipped, require_training_graph
from ..editor import IrGraphEditor, ir_taken_names
from ..records import PassRecord
from .chains import find_chains
from .emission import GraphEdit, emit_forward_split, emit_segment
from .geometry import _AUTO_R_CANDIDATES, VARIANTS, Chain
from .schedule import _block_bytes, _choose_segments, _internal_stash_bytes


class RowSplitPass(OnnxcompPass):
    """Row-split conv chains (LR-CNN). rows: R blocks per segment (int >= 1) or "auto" (needs budget_bytes);
    variant: "overl" | "2ps"; checkpoints: "auto" | N segments per chain."""

    name = "row_split"

    def __init__(self, rows: int | str = 2, variant: str = "overl", checkpoints: int | str = "auto",
                 budget_bytes: int | None = None, split_forward: bool = False,
                 accumulate_in_place: bool = True, chains: list[str] | tuple[str, ...] | None = None,
                 only_lowering: bool = False) -> None:
        if isinstance(rows, str) and rows != "auto":
            try:
                rows = int(rows)
            except ValueError:
                raise OnnxcompError(f"rows={rows!r}: use an integer >= 1 or 'auto'") from None
        if rows != "auto" and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise OnnxcompError(f"rows={rows!r}: use an integer >= 1 or 'auto'")
        if rows == "auto" and not budget_bytes:
            raise OnnxcompError("{rows}='auto' needs a memory budget ({budget_bytes})", options=("rows", "budget_bytes"))
        variant = str(variant).lower()
        if variant not in VARIANTS:
            raise OnnxcompError(f"variant={variant!r}: choose one of {', '.join(VARIANTS)}")
        if isinstance(checkpoints, str) and checkpoints != "auto":
            try:
                checkpoints = int(checkpoints)
            except ValueError:
                raise OnnxcompError(f"checkpoints={checkpoints!r}: use 'auto' or an integer >= 1") from None
        if checkpoints != "auto" and (isinstance(checkpoints, bool) or checkpoints < 1):
            raise OnnxcompError(f"checkpoints={checkpoints!r}: use 'auto' or an integer >= 1")
        if budget_bytes is not None and budget_bytes <= 0:
            raise OnnxcompError(f"budget_bytes={budget_bytes}: must be positive")
        self.rows = rows
        self.variant = variant
        self.checkpoints = checkpoints
        self.budget_bytes = budget_bytes
        self.split_forward = bool(split_forward)
        self.accumulate_in_place = bool(accumulate_in_place)
        if chains is not None and (isinstance(chains, str) or not all(isinstance(c, str) for c in chains)):
            raise OnnxcompError(f"chains={chains!r}: use a list of chain names (row_split_candidates)")
        self.chains = None if chains is None else tuple(chains)
        # Keep a chain only where splitting it lowers the predicted step peak (greedy, chain by chain): what
        # the compositions with encodings use, so that a lone stem Conv stays whole for chunk_backward.
        self.only_lowering = bool(only_lowering)

    def call(self, model: ir.Model) -> PassOutcome:
        analysis = analysis_of(model)
        if self.rows == "auto":
            return self._auto(model, analysis)
        if self.only_lowering:
            return self._lowering_only(model, analysis, int(self.rows))
        records, skipped = self.rewrite(model, analysis, int(self.rows), check_rows=True)
        return PassOutcome(model, bool(records), records, skipped)

    # ------------------------------------------------------------------ choosing R and chains by trials
    def _auto(self, model: ir.Model, analysis: GraphAnalysis) -> PassOutcome:
        """The smallest R (of _AUTO_R_CANDIDATES) whose trial graph's predicted step peak fits the budget."""
        assert self.budget_bytes is not None
        tried = []
        best: tuple[int, int, ir.Model, list[PassRecord], list[Skipped]] | None = None
        for R in _AUTO_R_CANDIDATES:
            trial = model.clone()
            records, skipped = self.rewrite(trial, analysis, R)
            if not records:
                peak = predicted_peak(model) + graph_heap_term(model)
                if peak > self.budget_bytes:
                    raise OnnxcompError(f"{{rows}} auto: no conv chain to split, and the predicted step peak "
                                        f"{peak / 2**20:.1f} MiB is over the budget of "
                                        f"{self.budget_bytes / 2**20:.1f} MiB", options=("rows",))
                return PassOutcome(model, False, [], skipped)
            # Plus the heap term (planner/heap_term.py): every row block adds nodes, whose small blocks the step's
            # measured peak counts.
            peak = predicted_peak(trial) + graph_heap_term(trial)
            tried.append({"rows": R, "predicted_peak_bytes": peak})
            if best is None or peak < best[1] or peak <= self.budget_bytes:
                best = (R, peak, trial, records, skipped)
            if peak <= self.budget_bytes or R >= max(r["output_rows"] for r in records):
                break
        assert best is not None
        R, peak, trial, records, skipped = best
        if peak > self.budget_bytes:  # never a silent miss (the plan JSON's "fits" alone went unnoticed)
            from ...planner.auto import dominant_at_peak

            _, top = dominant_at_peak(ir.serde.serialize_model(trial))
            raise OnnxcompError(
                f"{{rows}} auto: no row count fits the budget of {self.budget_bytes / 2**20:.1f} MiB; the best "
                f"reachable predicted step peak is {peak / 2**20:.1f} MiB (rows {R}), dominated by "
                + ", ".join(f"{n} ({b / 2**20:.1f} MiB)" for n, b in top), options=("rows",))
        for rec in records:
            rec.detail["auto"] = {"budget_bytes": self.budget_bytes, "chosen_rows": R, "predicted_peak_bytes": peak,
                                  "fits": peak <= self.budget_bytes, "tried": tried}
        model.graph = trial.graph        # the chosen trial's graph (the model object stays: in place)
        return PassOutcome(model, True, records, skipped)

    def _lowering_only(self, model: ir.Model, analysis: GraphAnalysis, R: int) -> PassOutcome:
        """The chains (of ``self.chains``, or all) whose split lowers the predicted step peak, added greedily."""
        names = [ch.name for ch in find_chains(analysis, model.graph)[0]
                 if self.chains is None or ch.name in self.chains]
        best = predicted_peak(model)
        chosen: list[str] = []
        kept: tuple[ir.Model, list[PassRecord], list[Skipped]] | None = None
        refused = []
        for name in names:
            trial = model.clone()
            records, skipped = self.rewrite(trial, analysis, R, chosen + [name])
            peak = predicted_peak(trial)
            if peak < best:
                chosen, best, kept = chosen + [name], peak, (trial, records, skipped)
            else:
                refused.append(Skipped(name, "row-split", f"splitting it would not lower the predicted step peak "
                                       f"({best / 2**20:.1f} -> {peak / 2**20:.1f} MiB)"))
        if kept is None:
            return PassOutcome(model, False, [], refused)
        trial, records, skipped = kept
        model.graph = trial.graph
        return PassOutcome(model, True, records, skipped + refused)

    # ------------------------------------------------------------------ one rewrite
    def rewrite(self, model: ir.Model, analysis: GraphAnalysis, R: int, names: list[str] | None = None,
                check_rows: bool = False) -> tuple[list[PassRecord], list[Skipped]]:
        """Row-split the chains of ``model`` (those called ``names``; default ``self.chains``, else all) into
        R blocks per segment, in place. ``analysis``: of ``model``'s graph or of the graph it was cloned
        from. ``check_rows``: refuse an R above the tallest chain's height (before touching the graph)."""
        chains, skipped = find_chains(analysis, model.graph)
        chains = _select(chains, list(self.chains) if names is None and self.chains is not None else names)
        if not chains:
            return [], skipped
        for chain in chains:
            chain.segments = _choose_segments(chain.layers, R, self.variant, self.checkpoints)
        if check_rows:
            tallest = max(chain.layers[j - 1].h_out for chain in chains for _, j in chain.segments)
            if R > tallest:  # would be clamped to each chain's height
                raise OnnxcompError(f"rows={R}: the tallest row-split chain has {tallest} output rows; "
                                    f"use {{rows}} <= {tallest} or 'auto'", options=("rows",))
        graph = model.graph
        edit = GraphEdit({n: k for k, n in enumerate(graph)})
        taken = ir_taken_names(graph)
        records = [self._emit_chain(graph, taken, analysis, ci, chain, R, edit) for ci, chain in enumerate(chains)]
        edit.apply(graph)
        return records, skipped

    def _emit_chain(self, graph: ir.Graph, taken: set[str], analysis: GraphAnalysis, ci: int, chain: Chain, R: int,
                    edit: GraphEdit) -> PassRecord:
        """Every segment of one chain (top segment first: backward order) into ``edit``; the chain's record."""
        seg_records = []
        for s in reversed(range(len(chain.segments))):
            i, j = chain.segments[s]
            layers = chain.layers[i:j]
            R_seg = max(1, min(R, layers[-1].h_out))
            editor = IrGraphEditor(graph, taken, f"onnxcomp_rows/c{ci}s{s}", sep="/")
            writer, info = emit_segment(editor, analysis, layers, R_seg, self.variant, self.accumulate_in_place, edit)
            recomputed = writer.recomputed_rows
            fwd_split = self.split_forward and len(layers) > 1
            if fwd_split:
                emit_forward_split(writer, IrGraphEditor(graph, taken, f"onnxcomp_rows/c{ci}s{s}f", sep="/"),
                                   self.variant, edit)
            seg_records.append({
                "layers": [lay.label for lay in layers], "input": layers[0].x.name,
                "rows": R_seg, "output_rows": layers[-1].h_out,
                "dropped_stash_bytes": _internal_stash_bytes(layers, 0, len(layers)),
                "predicted_block_bytes": _block_bytes(layers, R_seg, self.variant),
                "recomputed_rows": recomputed, "forward_split": fwd_split,
                "original_rows": sum(lay.h_out for lay in layers),
                **info,
            })
        seg_records.reverse()
        return self._chain_record(analysis, chain, R, seg_records)

    def _chain_record(self, analysis: GraphAnalysis, chain: Chain, R: int, seg_records: list[dict]) -> PassRecord:
        dropped = sum(s["dropped_stash_bytes"] for s in seg_records)
        kept = {chain.layers[i].x.name for i, _ in chain.segments}
        stashed = {st.name for st in analysis.stashed}
        last = chain.layers[-1].y.name
        dropped_names = [t.name for lay in chain.layers for t in [lay.y, *lay.fwd.outputs[1:2]]
                         if t.name in stashed and t.name not in kept and t.name != last]
        ckpt = sum(chain.layers[i].row_bytes("x") * chain.layers[i].h_in for i, _ in chain.segments[1:])
        x = chain.input.name
        return PassRecord("row_split", self.name, x, {
            "tensor": x, "pattern": "row-split", "encoding": "rows", "chain": chain.name,
            "nodes": [lay.label for lay in chain.layers], "variant": self.variant,
            "rows": R, "output_rows": max(s["output_rows"] for s in seg_records),
            "checkpoints": [chain.layers[i].x.name for i, _ in chain.segments],
            "dropped_stashes": dropped_names,
            "segments": seg_records, "original_bytes": dropped + ckpt,
            "predicted_bytes": ckpt + max(s["predicted_block_bytes"] for s in seg_records),
            "halos": [s.get("halo_rows") or s.get("kept_rows") for s in seg_records],
            # Weight gradients summed block by block and input gradients overlap-added: equal up to float
            # rounding, not bit-identical (--exact must not use it).
            "exact": False,
        }, tuple(dropped_names))


def _select(chains: list[Chain], names: list[str] | None) -> list[Chain]:
    """The chains called ``names`` (all when None); an unknown name is an error."""
    if names is None:
        return chains
    missing = [c for c in names if c not in {ch.name for ch in chains}]
    if missing:
        raise OnnxcompError(f"row_split: no conv chain named {missing}; candidates: "
                            f"{[ch.name for ch in chains]}", options=("chains",))
    return [ch for ch in chains if ch.name in names]


@dataclass
class RowChain:
    """A conv chain the row split can take (for the budget planner): its name (``RowSplitPass(chains=[name])``),
    forward nodes, input, height, the stashes it makes unnecessary, and the predicted step peak per row count.
    ``exact`` is False: weight gradients are summed block by block (rounding, not bit-identical)."""
    name: str
    nodes: tuple[str, ...]
    input: str
    output_rows: int
    dropped_stash_bytes: int
    exact: bool = False
    predicted_peak_before: int | None = None
    predicted_peak: dict[int, int] = field(default_factory=dict)

    def reduction(self, rows: int) -> int | None:
        if self.predicted_peak_before is None or rows not in self.predicted_peak:
            return None
        return self.predicted_peak_before - self.predicted_peak[rows]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": list(self.nodes), "input": self.input, "output_rows": self.output_rows,
                "dropped_stash_bytes": self.dropped_stash_bytes, "exact": self.exact,
                "predicted_peak_before": self.predicted_peak_before,
                "predicted_peak": {str(k): v for k, v in self.predicted_peak.items()}}


def row_split_candidates(model: onnx.ModelProto, rows: tuple[int, ...] = (2, 4, 8), variant: str = "overl",
                         predict: bool = True) -> list[RowChain]:
    """Every conv chain of ``model`` a row split can take, with the predicted step peak when that chain alone
    is split into each row count of ``rows`` (one trial rewrite each, on a clone) when ``predict``."""
    from ...analysis.cached import adopt_snapshot

    require_training_graph(model)
    ir_model = ir.serde.deserialize_model(model)
    adopt_snapshot(ir_model, model)
    analysis = analysis_of(ir_model)
    chains, _ = find_chains(analysis, ir_model.graph)
    out = [RowChain(ch.name, tuple(lay.label for lay in ch.layers), ch.input.name,
                    max(lay.h_out for lay in ch.layers), _internal_stash_bytes(ch.layers, 0, len(ch.layers)))
           for ch in chains]
    if predict and out:
        before = predicted_peak(model)
        for c in out:
            c.predicted_peak_before = before
            split = RowSplitPass(variant=variant, chains=[c.name])
            for r in rows:
                if r <= c.output_rows:
                    trial = ir_model.clone()
                    split.rewrite(trial, analysis, r)
                    c.predicted_peak[r] = predicted_peak(trial)
    return out
