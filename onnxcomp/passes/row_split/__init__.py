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
  peak fits the budget (LR-CNN §III-C), predicted by ``predicted_peak``: the planner's lower bound on the
  analysed graph plus ConvGrad's im2col workspace (within 1 MiB of the measured VGG-16 512x512 baseline;
  for row-split graphs it misses 10-25% of ORT overheads, so plan with a margin).

Row-split and row-merge are standard ONNX ops here (Slice, Pad, Add, Concat): they are memcpy-bound, ORT's
CPU kernels for them are as fast as a custom op would be, and a PyOp would add the bridge's copy of every
input (platform notes) plus a Python call per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from ...analysis import analyze_model
from ...errors import OnnxcompError
from ...planner.predict import predicted_peak
from ..base import GraphPass, PassResult, Skipped, require_training_graph, taken_names
from ..records import PassRecord
from .chains import _find_chains, _sole_accumulator
from .emission import _Emitter, _SegmentWriter, _stable_toposort  # noqa: F401  (chunk_stem_backward reuses the sort)
from .geometry import _AUTO_R_CANDIDATES, VARIANTS
from .schedule import _block_bytes, _choose_segments, _internal_stash_bytes


class RowSplitPass(GraphPass):
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

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        if self.only_lowering and self.rows != "auto":
            return self._lowering_only(model, int(self.rows))
        if self.rows != "auto":
            result = self._rewrite(model, int(self.rows))
            tallest = max((r["output_rows"] for r in result.records), default=None)
            if tallest is not None and int(self.rows) > tallest:  # would be clamped to each chain's height
                raise OnnxcompError(f"rows={self.rows}: the tallest row-split chain has {tallest} output rows; "
                                    f"use {{rows}} <= {tallest} or 'auto'", options=("rows",))
            return result
        tried = []
        best: tuple[int, int, PassResult] | None = None
        for R in _AUTO_R_CANDIDATES:
            result = self._rewrite(model, R)
            if not result.records:
                peak = predicted_peak(result.model)
                if peak > self.budget_bytes:
                    raise OnnxcompError(f"{{rows}} auto: no conv chain to split, and the predicted step peak "
                                        f"{peak / 2**20:.1f} MiB is over the budget of "
                                        f"{self.budget_bytes / 2**20:.1f} MiB", options=("rows",))
                return result
            peak = predicted_peak(result.model)
            tried.append({"rows": R, "predicted_peak_bytes": peak})
            if best is None or peak < best[1]:
                best = (R, peak, result)
            if peak <= self.budget_bytes:
                best = (R, peak, result)
                break
            if R >= max(r["output_rows"] for r in result.records):
                break
        assert best is not None
        R, peak, result = best
        if peak > self.budget_bytes:  # never a silent miss (the plan JSON's "fits" alone went unnoticed)
            from ...planner.auto import dominant_at_peak

            _, top = dominant_at_peak(result.model)
            raise OnnxcompError(
                f"{{rows}} auto: no row count fits the budget of {self.budget_bytes / 2**20:.1f} MiB; the best "
                f"reachable predicted step peak is {peak / 2**20:.1f} MiB (rows {R}), dominated by "
                + ", ".join(f"{n} ({b / 2**20:.1f} MiB)" for n, b in top), options=("rows",))
        for rec in result.records:
            rec.detail["auto"] = {"budget_bytes": self.budget_bytes, "chosen_rows": R, "predicted_peak_bytes": peak,
                           "fits": peak <= self.budget_bytes, "tried": tried}
        return result

    def _lowering_only(self, model: onnx.ModelProto, R: int) -> PassResult:
        """The chains (of ``self.chains``, or all) whose split lowers the predicted step peak, added greedily."""
        names = [ch.name for ch in _find_chains(analyze_model(model))[0]
                 if self.chains is None or ch.name in self.chains]
        best = predicted_peak(model)
        chosen: list[str] = []
        result = PassResult(self.copy(model))
        refused = []
        for name in names:
            trial = self._rewrite(model, R, chosen + [name])
            peak = predicted_peak(trial.model)
            if peak < best:
                chosen, best, result = chosen + [name], peak, trial
            else:
                refused.append(Skipped(name, "row-split", f"splitting it would not lower the predicted step peak "
                                       f"({best / 2**20:.1f} -> {peak / 2**20:.1f} MiB)"))
        result.skipped.extend(refused)
        return result

    def _rewrite(self, model: onnx.ModelProto, R: int, names: list[str] | None = None) -> PassResult:
        analysis = analyze_model(model)
        chains, skipped = _find_chains(analysis)
        names = list(self.chains) if names is None and self.chains is not None else names
        if names is not None:
            missing = [c for c in names if c not in {ch.name for ch in chains}]
            if missing:
                raise OnnxcompError(f"row_split: no conv chain named {missing}; candidates: "
                                    f"{[ch.name for ch in chains]}", options=("chains",))
            chains = [ch for ch in chains if ch.name in names]
        result = PassResult(self.copy(model), skipped=skipped)
        if not chains:
            return result
        out = result.model
        graph = out.graph
        taken = taken_names(graph)
        wshapes = {n: t.shape for n, t in analysis.tensors.items() if t.shape is not None}
        nodes = list(graph.node)
        index_of = {id(n): i for i, n in enumerate(model.graph.node)}
        replace: dict[int, list[onnx.NodeProto]] = {}   # original index of first removed node -> new nodes
        remove: set[int] = set()
        value_info: list[onnx.ValueInfoProto] = []
        drop_idx_outputs: set[int] = set()
        for ci, chain in enumerate(chains):
            chain.segments = _choose_segments(chain.layers, R, self.variant, self.checkpoints)
            seg_records = []
            for si, (i, j) in enumerate(reversed(chain.segments)):     # top segment first (backward order)
                layers = chain.layers[i:j]
                R_seg = max(1, min(R, layers[-1].h_out))
                em = _Emitter(out, taken, f"onnxcomp_rows/c{ci}s{len(chain.segments) - 1 - si}")
                accs = {}
                if self.accumulate_in_place:
                    for lay in layers:
                        for g in lay.grad.output[1:3]:
                            ipa = _sole_accumulator(analysis, g)
                            if ipa is not None:
                                accs[g] = model.graph.node[ipa]
                                remove.add(ipa)
                writer = _SegmentWriter(em, layers, R_seg, wshapes, accs)
                dy_name = layers[-1].y + "_grad"
                info = writer.overl([dy_name]) if self.variant == "overl" else writer.twops([dy_name])
                writer.finish_params()
                fwd_split = self.split_forward and len(layers) > 1
                if fwd_split:
                    fem = _Emitter(out, taken, f"onnxcomp_rows/c{ci}s{len(chain.segments) - 1 - si}f")
                    fem._consts = em._consts
                    writer.em = fem
                    writer.forward_split(self.variant)
                    fwd_idx = [index_of[id(lay.fwd)] for lay in layers]
                    remove.update(fwd_idx)
                    replace[min(fwd_idx)] = fem.nodes
                    value_info += fem.value_info
                grads = [index_of[id(lay.grad)] for lay in layers]
                first = min(grads)
                remove.update(grads)
                replace[first] = em.nodes
                value_info += em.value_info
                for lay in layers:
                    if lay.kind == "MaxPool":
                        drop_idx_outputs.add(index_of[id(lay.fwd)])
                seg_records.append({
                    "layers": [lay.fwd.name or lay.y for lay in layers], "input": layers[0].x,
                    "rows": R_seg, "output_rows": layers[-1].h_out,
                    "dropped_stash_bytes": _internal_stash_bytes(layers, 0, len(layers)),
                    "predicted_block_bytes": _block_bytes(layers, R_seg, self.variant),
                    "recomputed_rows": em.recomputed_rows, "forward_split": fwd_split,
                    "original_rows": sum(lay.h_out for lay in layers),
                    **info,
                })
            seg_records.reverse()
            dropped = sum(s["dropped_stash_bytes"] for s in seg_records)
            kept = {chain.layers[i].x for i, _ in chain.segments}
            stashed = {st.name for st in analysis.stashed}
            dropped_names = [t for lay in chain.layers for t in [lay.y] + list(lay.fwd.output[1:2])
                             if t in stashed and t not in kept and t != chain.layers[-1].y]
            ckpt = sum(chain.layers[i].row_bytes("x") * chain.layers[i].h_in for i, _ in chain.segments[1:])
            result.records.append(PassRecord("row_split", self.name, chain.layers[0].x, {
                "tensor": chain.layers[0].x, "pattern": "row-split", "encoding": "rows", "chain": chain.name,
                "nodes": [lay.fwd.name or lay.y for lay in chain.layers], "variant": self.variant,
                "rows": R, "output_rows": max(s["output_rows"] for s in seg_records),
                "checkpoints": [chain.layers[i].x for i, _ in chain.segments],
                "dropped_stashes": dropped_names,
                "segments": seg_records, "original_bytes": dropped + ckpt,
                "predicted_bytes": ckpt + max(s["predicted_block_bytes"] for s in seg_records),
                "halos": [s.get("halo_rows") or s.get("kept_rows") for s in seg_records],
                # Weight gradients summed block by block and input gradients overlap-added: equal up to float
                # rounding, not bit-identical (--exact must not use it).
                "exact": False,
            }, tuple(dropped_names)))
        new_nodes: list[onnx.NodeProto] = []
        for i, n in enumerate(nodes):
            if i in replace:
                new_nodes.extend(replace[i])
            if i in remove:
                continue
            if i in drop_idx_outputs and len(n.output) > 1:
                still_read = any(n.output[1] in m.input for k_, m in enumerate(nodes) if k_ not in remove)
                if not still_read:
                    del n.output[1:]
            new_nodes.append(n)
        del graph.node[:]
        graph.node.extend(_stable_toposort(new_nodes, {i.name for i in graph.input} |
                                           {i.name for i in graph.initializer}))
        graph.value_info.extend(value_info)
        return result


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

    def to_dict(self) -> dict:
        return {"name": self.name, "nodes": list(self.nodes), "input": self.input, "output_rows": self.output_rows,
                "dropped_stash_bytes": self.dropped_stash_bytes, "exact": self.exact,
                "predicted_peak_before": self.predicted_peak_before,
                "predicted_peak": {str(k): v for k, v in self.predicted_peak.items()}}


def row_split_candidates(model: onnx.ModelProto, rows: tuple[int, ...] = (2, 4, 8), variant: str = "overl",
                         predict: bool = True) -> list[RowChain]:
    """Every conv chain of ``model`` a row split can take, with the predicted step peak when that chain alone
    is split into each row count of ``rows`` (one trial rewrite each) when ``predict``."""
    require_training_graph(model)
    chains, _ = _find_chains(analyze_model(model))
    out = [RowChain(ch.name, tuple(lay.fwd.name or lay.y for lay in ch.layers), ch.layers[0].x,
                    max(lay.h_out for lay in ch.layers), _internal_stash_bytes(ch.layers, 0, len(ch.layers)))
           for ch in chains]
    if predict and out:
        before = predicted_peak(model)
        for c in out:
            c.predicted_peak_before = before
            for r in rows:
                if r <= c.output_rows:
                    trial = RowSplitPass(rows=r, variant=variant, chains=[c.name]).run(model)
                    c.predicted_peak[r] = predicted_peak(trial.model)
    return out
