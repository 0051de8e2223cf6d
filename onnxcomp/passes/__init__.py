"""Graph rewrites, one pass per module; a policy is an ordered list of passes (or pass factories)."""
from __future__ import annotations

from functools import partial
from typing import Callable

from .base import GraphPass, PassResult, Skipped
from .chunk_stem_backward import ChunkedStemBackwardPass
from .defer_weight_grad import DeferWeightGradientPass
from .dpr import DPR_FORMATS, DprPass
from .eager_accumulation import EagerAccumulationPass
from .error_bounded import ErrorBoundedPass
from .maxpool_index import MaxPoolIndexPass
from .recompute import RecomputePass
from .row_split import RowSplitPass
from .signbits import SignBitsPass
from .sparse import SparsePass
from .split_weight import SplitWeightPass
from .early_weight_grad import EarlyWeightGradientPass
from .transformer import (TRANSFORMER_EXACT, TRANSFORMER_RECOMPUTE, AttentionDropoutRecomputePass,
                          AttentionProbsRecomputePass, DropoutMaskPass, TransformerRecomputePass)

# Scheduling first: large weight gradients (VGG's fc1 dW) deferred to the end of backward, then every
# accumulator moved right behind its gradient.
REORDER: list[Callable[..., GraphPass]] = [DeferWeightGradientPass, EagerAccumulationPass]
LOSSLESS_PASSES: list[Callable[..., GraphPass]] = [*REORDER, SignBitsPass, MaxPoolIndexPass]

# Before a lossy pass: ReluGrad must keep reading exact signs, so it gets its own sign bits. Large fc
# weights are split into row blocks first when asked (--split-weights: it renames the parameter, and dX is
# summed in blocks, so only the lossy policies offer it).
LOSSY_FIRST: list[Callable[..., GraphPass]] = [SplitWeightPass, *REORDER, partial(SignBitsPass, split_readers=True),
                                               MaxPoolIndexPass, *TRANSFORMER_EXACT]

POLICIES: dict[str, list[Callable[..., GraphPass]]] = {
    # Exact: cheap layers (BN, ReLU, pooling) recomputed in backward, then the lossless encodings.
    # Transformers: weight gradients early, LayerNorm / GELU outputs and attention probabilities (before and
    # after dropout) recomputed, Dropout masks as bits (passes/transformer.py).
    "lossless": [*REORDER, RecomputePass, *TRANSFORMER_EXACT, SignBitsPass, MaxPoolIndexPass, SparsePass],
    # The lossless encodings alone (Gist's lossless set), without recomputation.
    "lossless-encode": [*LOSSLESS_PASSES, DropoutMaskPass, SparsePass],
    "recompute": [*REORDER, RecomputePass, *TRANSFORMER_RECOMPUTE],
    # LR-CNN: conv chains split into row blocks, recomputed row by row in backward (exact).
    "rows": [RowSplitPass, EagerAccumulationPass],
    # Reordering alone: the share of a lossless saving that needs no codec at all.
    "reorder": REORDER,
    # Gist: lossless encodings where they apply, the rest of the float stashes in reduced precision.
    # The first layer's backward in batch chunks (exact up to rounding; its BN input recomputed from the
    # image, so it needs no stash) before DPR reduces what is left.
    **{f"dpr-{fmt}": [*LOSSY_FIRST, ChunkedStemBackwardPass, partial(DprPass, dpr_format=fmt)]
       for fmt in DPR_FORMATS},
    # COMET: lossless where it applies, error-bounded conv/fc inputs, reduced precision elsewhere.
    # (DprPass unbound: its default fp16 gives way to --dpr-format / the config's dpr_format.)
    "comet": [*LOSSY_FIRST, ErrorBoundedPass, ChunkedStemBackwardPass, DprPass, SparsePass],
}

__all__ = ["AttentionDropoutRecomputePass", "AttentionProbsRecomputePass", "DropoutMaskPass", "EarlyWeightGradientPass",
           "TransformerRecomputePass", "ChunkedStemBackwardPass", "DeferWeightGradientPass", "DprPass", "RecomputePass", "RowSplitPass", "EagerAccumulationPass", "ErrorBoundedPass", "GraphPass", "MaxPoolIndexPass", "POLICIES",
           "PassResult", "SignBitsPass", "Skipped", "SparsePass", "SplitWeightPass"]
