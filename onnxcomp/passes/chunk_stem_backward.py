"""Pass: the first layer's backward (ReluGrad → BatchNormalizationGrad → weight-only ConvGrad) in batch chunks.

The stem case of ``chunk_backward`` (kept under its old name for policies and callers that ask for exactly
this region): ``ChunkedBackwardPass`` restricted to a region of at most three ops whose BatchNorm sits right
above the first-layer ConvGrad. A CNN's first layer works at the highest resolution, and its backward holds
three full-size tensors at once (ReluGrad's output, BN's dX, dY); on ResNet-18 at batch 32, 64×64, once
every stash is encoded, this point *is* the training-step peak. The BN input is recomputed per chunk from
the image when the forward Conv read it (one stash fewer). See chunk_backward/ for the two-pass BN
scheme, the ordering gates and exactness (rounding only: not bit-identical).
"""
from __future__ import annotations

from ..analysis import GraphAnalysis
from .base import Skipped
from .chunk_backward import DEFAULT_CHUNKS, PREFIX, ChunkedBackwardPass, Region  # noqa: F401  (re-export)

PATTERN = "BatchNormalizationGrad→weight-only ConvGrad"


class ChunkedStemBackwardPass(ChunkedBackwardPass):
    """chunks: candidate chunk counts (the planner picks). force: rewrite every site with the first count,
    without asking the planner (tests, measurements)."""

    name = "chunk_stem_backward"

    def __init__(self, chunks: tuple[int, ...] | int = DEFAULT_CHUNKS, force: bool = False) -> None:
        super().__init__(chunks=chunks, force=force, max_ops=3)

    def candidates(self, analysis: GraphAnalysis) -> tuple[list[Region], list[Skipped]]:
        regions, skipped = super().candidates(analysis)
        stem = [r for r in regions if len(r.nodes) >= 2 and r.op_types[-2] == "BatchNormalizationGrad"
                and (len(r.nodes) == 2 or r.op_types[0] == "ReluGrad")]
        skipped += [Skipped(r.name, PATTERN, "not a BatchNorm stem region (chunk_backward takes it)")
                    for r in regions if r not in stem and r.terminal not in {s.terminal for s in stem}]
        return stem, skipped
