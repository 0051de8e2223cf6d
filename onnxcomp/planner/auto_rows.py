"""Row-split conv chains as a region technique of the lossy budget planner (`--policy auto --budget`).

Per-stash options cannot lower a peak set by a forward convolution's own input, output and im2col buffer: on
BN-free conv stacks (plain_deep, VGG-16) those sit in the first layers' *forward* pass, and the lossy plan
stopped at ~2× (plain_deep, batch 8, 48×48: every stash encoded, the forward floor 7.0 MiB predicted of a 21.7
MiB baseline). The row split (passes/row_split, LR-CNN) takes whole conv chains: with ``split_forward`` the
forward runs row block by row block, the chain's intermediates are never stashed (backward recomputes them per
row block from the chain input) — plain_deep's predicted peak falls to 4.5 MiB before any encoding.

Row split is exact only up to float rounding (weight gradients summed block by block): never under --exact.
Which row count, and whether the forward is split too, is decided here by trial rewrites predicted by the
planner's own live curve (both execution orders), not by model: the setting with the lowest predicted peak,
the fewest rows where two are within ``_TIE`` of each other. Chains are kept only where splitting them lowers
the predicted peak (``RowSplitPass(only_lowering=True)``), so a lone stem conv stays whole for the chunked
backward regions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx

from ..passes.chunk_backward import ChunkedBackwardPass

# (rows, split_forward) tried, cheapest first: fewer blocks recompute fewer halo rows.
CANDIDATES: tuple[tuple[int, bool], ...] = ((4, True), (8, True), (4, False))
_TIE = 0.02
# A row count whose blocks hold less than this of a chain's largest tensor is not tried: block tensors then sit
# under glibc's mmap threshold (measure pins 128 KiB), on the heap, whose slack the prediction cannot see. Measured
# (batch 8, 48x48 plain conv stack, 8 rows: 147 KiB blocks): 0.4-2.2 MiB per step against 1.06 predicted (up to
# 2.2 MiB in 4 of 13 processes); the same graph with every buffer above 4 KiB mmap'ed measured a steady 1.3-1.4.
# The input chain's chunks keep the same floor (planner/auto.py, MIN_CHUNK_WORKING_SET).
MIN_ROW_BLOCK_BYTES = 256 << 10


@dataclass(frozen=True)
class RowsChoice:
    """A row split the planner applies first in its pipeline (before split weights and scheduling)."""
    rows: int
    split_forward: bool
    predicted_peak: int          # of the row-split, scheduled graph before any stash option
    chains: tuple[str, ...]      # the chains whose split lowered the predicted peak

    def build(self) -> Any:
        from ..passes import RowSplitPass

        return RowSplitPass(rows=self.rows, split_forward=self.split_forward, chains=list(self.chains))

    def record(self) -> dict[str, Any]:
        return {"region": f"conv chains {', '.join(self.chains)}", "technique": "row_split", "exact": False,
                "rows": self.rows, "split_forward": self.split_forward,
                "why": "the predicted peak sat in conv chains' own forward/backward working set, which no stash "
                       "option lowers; rows (and forward split) chosen by the lowest predicted peak "
                       "(planner/auto_rows.py)"}


def choose_rows(model: onnx.ModelProto, baseline_peak: int,
                candidates: tuple[tuple[int, bool], ...] = CANDIDATES) -> RowsChoice | None:
    """The row split of ``model`` with the lowest predicted step peak (scheduling passes applied, as the
    planner's base graph), or None where no chain's split lowers ``baseline_peak``."""
    from ..passes import DeferWeightGradientPass, EagerAccumulationPass, RowSplitPass
    from ..passes.row_split import row_split_candidates
    from .auto import apply, predicted_live_both_orders

    if not row_split_candidates(model, predict=False):
        return None
    best: RowsChoice | None = None
    for rows, split_forward in candidates:
        trial = RowSplitPass(rows=rows, split_forward=split_forward, only_lowering=True)
        applied = apply(model, [trial, DeferWeightGradientPass(), EagerAccumulationPass()])
        records = [r for r in applied.log.records if r.kind == "row_split"]
        chains = tuple(r.detail["chain"] for r in records)
        if not chains or (_largest_block(model, records, rows) or MIN_ROW_BLOCK_BYTES) < MIN_ROW_BLOCK_BYTES:
            continue
        _, live = predicted_live_both_orders(applied.model)
        peak = int(live.max()) if len(live) else 0
        if peak < baseline_peak and (best is None or peak < best.predicted_peak * (1 - _TIE)):
            best = RowsChoice(rows, split_forward, peak, chains)
    return best


def _largest_block(model: onnx.ModelProto, records: list[Any], rows: int) -> int | None:
    """Bytes of one row block of the largest tensor the split chains produce (None where the records name no
    node of ``model``)."""
    from . import memo

    tensors = memo.analysis(model).tensors
    chain_nodes = {n for r in records for n in r.detail.get("nodes", ())}
    outputs = [o for node in model.graph.node if node.name in chain_nodes for o in node.output if o in tensors]
    return max(tensors[o].nbytes for o in outputs) // rows if outputs else None


# Node-name prefix of everything RowSplitPass writes (passes/row_split: IrGraphEditor prefix).
ROW_BLOCK_PREFIX = "onnxcomp_rows/"


def outside_row_blocks(regions: list[Any]) -> list[Any]:
    """Chunkable backward regions (chunk_backward.Region) not ending in a row block's ConvGrad: batch chunks of
    a row block would bound a working set the row split bounds already, and trying them costs a trial rewrite
    each (plain_deep at 4 rows: 16 terminals, minutes of planning)."""
    return [r for r in regions if not r.terminal.startswith(ROW_BLOCK_PREFIX)]



class ChunkedOutsideRowBlocks(ChunkedBackwardPass):
    """ChunkedBackwardPass that leaves the row blocks' ConvGrad clones alone (see outside_row_blocks)."""

    def candidates(self, analysis: Any) -> tuple[list[Any], list[Any]]:
        regions, skipped = super().candidates(analysis)
        return outside_row_blocks(regions), skipped
