"""Graph rewrites, one pass per module; a policy (passes.policy) is a named pass sequence with declared options."""
from __future__ import annotations

from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, PassResult, Skipped
from .chunk_attention import ChunkedAttentionBackwardPass, ChunkedAttentionForwardPass
from .chunk_backward import ChunkedBackwardPass, chunkable_regions
from .chunk_mlp import ChunkedMlpBackwardPass
from .chunk_stem_backward import ChunkedStemBackwardPass
from .defer_weight_grad import DeferWeightGradientPass
from .dpr import DPR_FORMATS, DprPass
from .eager_accumulation import EagerAccumulationPass
from .error_bounded import ErrorBoundedPass
from .fixed_rate import FIXED_RATES, FixedRatePass
from .hoist_dropout import HoistDropoutDrawsPass
from .interval_mask import IntervalMaskPass
from .mask_grad import MaskGradPass
from .maxpool_index import MaxPoolIndexPass
from .policy import OPTIONS, Policy, Step, policy, step
from .q8 import Q8Pass
from .recompute import RecomputePass
from .row_split import RowSplitPass, row_split_candidates
from .signbits import SignBitsPass
from .sparse import SparsePass
from .split_weight import SplitWeightPass
from .early_weight_grad import EarlyWeightGradientPass
from .transformer import (TRANSFORMER_EXACT, TRANSFORMER_RECOMPUTE, AttentionDropoutRecomputePass,
                          AttentionProbsRecomputePass, DropoutMaskPass, TransformerRecomputePass)

# Scheduling first: large weight gradients (VGG's fc1 dW) deferred to the end of backward, then every
# accumulator moved right behind its gradient.
REORDER = (step(DeferWeightGradientPass), step(EagerAccumulationPass))
# Coverage by gradient semantics (analysis.patterns.GRADIENT_NEEDS): sign bits for ReluGrad/LeakyReluGrad,
# the Clip gradient's interval mask (ReLU6, relu6-based HardSigmoid/HardSwish), MaxPool window offsets.
LOSSLESS_ENCODINGS = (step(SignBitsPass), step(IntervalMaskPass), step(MaxPoolIndexPass))

# Before a lossy pass: ReluGrad must keep reading exact signs, so it gets its own sign bits. Large fc
# weights are split into row blocks first when asked (split_weight_bytes: it renames the parameter, and dX
# is summed in blocks, so only the lossy policies offer it).
# Transformer graphs: the exact transformer passes (passes/transformer.py) before any lossy one.
LOSSY_FIRST = (step(SplitWeightPass), *REORDER, step(SignBitsPass, split_readers=True), step(IntervalMaskPass),
               step(MaxPoolIndexPass), *TRANSFORMER_EXACT)

# Chunked regions ahead of DPR / SZ / zfp: a region's Slice of a raw stash would hide it from those encoders
# (they time a decoder by the stash's first backward reader's gradient), so such regions are not offered.
# At most three ops (the stem's ReluGrad, BN, ConvGrad as before): longer regions left a decoder up to 7 nodes
# ahead of its reader under ORT's DEFAULT order (tests/test_execution_order.py).
CHUNKS_BEFORE_ENCODERS = step(ChunkedBackwardPass, raw_stashes=False, max_ops=3)
# Transformers: attention's backward (dP, rebuilt P, DropoutGrad/SoftmaxGrad outputs) and forward (scores to
# the product with V, the Dropout's mask drawn as before) in head/batch chunks, exact. Last: their Slices of a
# stash would hide it from an encoder that runs later; the forward one needs P recomputed (chunk_attention.py).
ATTENTION_CHUNKS = (step(ChunkedAttentionBackwardPass), step(ChunkedAttentionForwardPass))
# Lossy policies: where a forward attention's T² map is ≥ 8 MiB, its Dropout is chunked too (a Dropout per
# chunk: the same keep probability, other random numbers): the whole-map draw (input, output and mask: 9
# bytes per score) was what held long sequences above the budget (docs/transformers.md, "Sequence length").
# Exact policies: the Dropout draws themselves (9 bytes per score, whole) at the step's start, in order, where
# nothing else is alive; only where a draw is ≥ 8 MiB (passes/hoist_dropout.py).
HOIST_DRAWS = step(HoistDropoutDrawsPass, draw_bytes=8 << 20)
# Lossy policies also run each MLP's backward (fc1 recompute, activation gradient, the products and weight
# gradients) in batch chunks, the weight gradients summed over chunks: not bit-identical (passes/chunk_mlp.py);
# only where that lowers the predicted step peak.
LOSSY_ATTENTION_CHUNKS = (step(ChunkedAttentionBackwardPass),
                          step(ChunkedAttentionForwardPass, chunk_dropout_bytes=8 << 20),
                          step(ChunkedMlpBackwardPass, only_lowering=True))

# Lossy policies, last: ReluGrad on a decoded sign mask as Mul(dY, mask) (ORT's ReluGrad branches per element;
# same values, a masked zero's sign may differ: passes/mask_grad.py). After the chunked regions (their finder
# looks for ReluGrad); never in an exact policy.
MASK_GRAD = step(MaskGradPass)

_POLICIES = [
    # Transformers: weight gradients early, LayerNorm / GELU outputs and attention probabilities (before and
    # after dropout) recomputed, Dropout masks as bits (passes/transformer.py).
    policy("lossless", "exact: cheap layers (BN, ReLU, pooling; LayerNorm, GELU, attention probabilities) "
           "recomputed in backward, then the lossless encodings (Dropout masks as bits)",
           *REORDER, RecomputePass, *TRANSFORMER_EXACT, *LOSSLESS_ENCODINGS, SparsePass, *ATTENTION_CHUNKS,
           HOIST_DRAWS, options=("min_bytes", "overrides", "native")),
    policy("lossless-encode", "the lossless encodings alone (Gist's lossless set), without recomputation",
           *REORDER, *LOSSLESS_ENCODINGS, DropoutMaskPass, SparsePass, options=("min_bytes", "overrides", "native")),
    policy("recompute", "cheap layers (and transformer LayerNorm, GELU, attention probabilities) recomputed "
           "in backward", *REORDER, RecomputePass, *TRANSFORMER_RECOMPUTE, *ATTENTION_CHUNKS, options=("min_bytes",)),
    policy("rows", "LR-CNN: conv chains split into row blocks, recomputed row by row in backward (exact)",
           RowSplitPass, EagerAccumulationPass, options=("rows", "variant", "checkpoints", "budget_bytes")),
    # Row split composed with encodings (docs/chunking.md): the chains first (their finder needs the original
    # backward ops), only those whose split lowers the predicted peak; then the encodings take what is still
    # stashed outside the chains (and chunk_backward the first layer when no chain took it).
    policy("rows+lossless", "LR-CNN row split, then the lossless policy on the remaining stashes",
           step(RowSplitPass, only_lowering=True), *REORDER, RecomputePass, *LOSSLESS_ENCODINGS, SparsePass,
           options=("rows", "variant", "checkpoints", "budget_bytes", "min_bytes", "overrides", "native")),
    policy("rows+comet", "LR-CNN row split, then COMET on the remaining stashes and batch-chunked backward "
           "regions", step(RowSplitPass, only_lowering=True), *LOSSY_FIRST, ErrorBoundedPass,
           CHUNKS_BEFORE_ENCODERS, DprPass, SparsePass, MASK_GRAD,
           options=("rows", "variant", "checkpoints", "budget_bytes", "min_bytes", "overrides",
                    "split_weight_bytes", "eb", "adaptive", "dpr_format", "native")),
    policy("chunks", "backward regions down to the first layer in batch chunks, nothing else (exact up to "
           "float rounding, not bit-identical)", *REORDER, ChunkedBackwardPass, options=("min_bytes",)),
    # The lossless encodings (not the recomputation: recomputed tensors are full size again in backward, where
    # the regions run), then the regions in batch chunks: no lossy codec, but rounding-level differences.
    policy("encode+chunks", "the lossless encodings, then backward regions in batch chunks (exact up "
           "to float rounding, not bit-identical)", *REORDER, *LOSSLESS_ENCODINGS, DropoutMaskPass, SparsePass,
           ChunkedBackwardPass, options=("min_bytes", "overrides", "native")),
    policy("reorder", "reordering alone: the share of a lossless saving that needs no codec at all", *REORDER,
           options=("min_bytes",)),
    # Gist: lossless encodings where they apply, the rest of the float stashes in reduced precision. Backward
    # regions down to the first layer in batch chunks (exact up to rounding; a stem BN input recomputed from
    # the image, so it needs no stash) before DPR reduces what is left: only regions over stashes already
    # encoded or recomputed (CHUNKS_BEFORE_ENCODERS).
    *(policy(f"dpr-{fmt}", f"Gist: lossless encodings, the rest of the float stashes in {fmt}", *LOSSY_FIRST,
             CHUNKS_BEFORE_ENCODERS, step(DprPass, dpr_format=fmt), *LOSSY_ATTENTION_CHUNKS, MASK_GRAD,
             options=("min_bytes", "overrides", "split_weight_bytes", "native"))
      for fmt in DPR_FORMATS),
    # Mixed: fp8, except the stashes recompute clones are rebuilt from (transformers: the LayerNorm inputs, from
    # which LayerNorm's output, Q/K/V and the GELU input are recomputed) in a wider format, since their rounding
    # error reaches every rebuilt tensor (docs/notes/vitacc.md).
    *(policy(f"dpr-fp8-src{fmt[2:]}", f"dpr-fp8, but stashes that recomputation rebuilds tensors from in {fmt}",
             *LOSSY_FIRST, CHUNKS_BEFORE_ENCODERS, step(DprPass, dpr_format="fp8", dpr_source_format=fmt),
             *LOSSY_ATTENTION_CHUNKS, MASK_GRAD, options=("min_bytes", "overrides", "split_weight_bytes", "native"))
      for fmt in ("fp16", "fp10")),
    # COMET: lossless where it applies, error-bounded conv/fc inputs, reduced precision elsewhere.
    policy("comet", "COMET: lossless where it applies, error-bounded conv/fc inputs, reduced precision "
           "elsewhere", *LOSSY_FIRST, ErrorBoundedPass, CHUNKS_BEFORE_ENCODERS, DprPass, SparsePass,
           *LOSSY_ATTENTION_CHUNKS, MASK_GRAD,
           options=("min_bytes", "overrides", "split_weight_bytes", "eb", "adaptive", "dpr_format", "native")),
    # CSWAP+/FreeLunch: the float stashes DPR would take held by the fixed-rate zfp codec at N bits/value.
    *(policy(f"zfp-{rate}", f"fixed-rate zfp codec at {rate} bits/value for the float stashes DPR would take",
             *LOSSY_FIRST, CHUNKS_BEFORE_ENCODERS, step(FixedRatePass, rate=rate), *LOSSY_ATTENTION_CHUNKS, MASK_GRAD,
             options=("min_bytes", "overrides", "split_weight_bytes", "native"))
      for rate in FIXED_RATES),
    # Mesa: the float stashes DPR would take as 8-bit affine codes with a min and scale per channel (row).
    policy("q8", "Mesa-style 8-bit per-channel affine quantisation of the float stashes DPR would take",
           *LOSSY_FIRST, CHUNKS_BEFORE_ENCODERS, Q8Pass, *LOSSY_ATTENTION_CHUNKS, MASK_GRAD,
           options=("min_bytes", "overrides", "split_weight_bytes", "native")),
]
# Per stash and backward region, the cheapest technique that makes the predicted step peak fit a budget
# (onnxcomp/planner/auto.py; docs/auto-planner.md).
from .auto import AutoPass  # noqa: E402

_POLICIES.append(policy("auto", "per stash and backward region, the cheapest technique (exact ones first) "
                        "whose predicted step peak fits --budget; --exact: bit-identical ones only", AutoPass,
                        options=("budget_bytes", "exact", "min_bytes", "budget_for", "margin")))
POLICIES: dict[str, Policy] = {p.name: p for p in _POLICIES}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise OnnxcompError(f"unknown policy {name!r}; choose one of: {', '.join(sorted(POLICIES))}") from None


__all__ = ["AttentionDropoutRecomputePass", "ChunkedAttentionBackwardPass", "ChunkedMlpBackwardPass", "ChunkedAttentionForwardPass", "AttentionProbsRecomputePass", "DropoutMaskPass",
           "EarlyWeightGradientPass", "HoistDropoutDrawsPass", "TransformerRecomputePass", "ChunkedBackwardPass", "ChunkedStemBackwardPass",
           "DeferWeightGradientPass", "DprPass", "RecomputePass", "RowSplitPass", "EagerAccumulationPass",
           "ErrorBoundedPass", "FixedRatePass", "IntervalMaskPass", "MaskGradPass", "MaxPoolIndexPass", "OnnxcompPass",
           "PassOutcome", "Q8Pass", "POLICIES", "AutoPass", "OPTIONS", "PassResult", "Policy", "SignBitsPass", "Step",
           "get_policy", "Skipped", "SparsePass", "SplitWeightPass", "chunkable_regions", "row_split_candidates"]
