"""Pass: delayed precision reduction (Gist) — keep the backward copy of a stash in FP16/BF16/FP10/FP8.

Only the stashed copy is reduced: the encoder reads the FP32 tensor after its forward readers are done
with it (they still read the FP32 original), and the decoder widens it back to FP32 just before the
backward consumer. Applies to float stashes no lossless encoding took (run it after the lossless passes).

fp16 is held by ONNX's own ops by default (``native``): Clip to ±65504 then Cast, and Cast back. That is
bit-identical to the ``dpr_fp16`` codec (round to nearest even, finite values saturate, subnormals and NaN
kept) except that ±Inf saturates as well, and it skips the PyOp bridge, which copies every input and
output (ResNet-18 stem: the float32 decode of conv1's output existed twice, +13 MiB at the step's peak).
"""
from __future__ import annotations


import numpy as np

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import DPR
from .encode_stash import EncodeStashPass, Encoding

DPR_FORMATS = ("fp16", "bf16", "fp10", "fp8")
_BITS = {"fp16": 16, "bf16": 16, "fp10": 32 / 3, "fp8": 8}


class DprPass(EncodeStashPass):
    name = "dpr"
    encoding = DPR

    def __init__(self, dpr_format: str = "fp16", min_bytes: int = 64 * 1024,
                 consumers: tuple[str, ...] | None = None, native: bool = True,
                 dpr_source_format: str | None = None) -> None:
        for fmt in (dpr_format, dpr_source_format or dpr_format):
            if fmt not in DPR_FORMATS:
                raise ValueError(f"unknown DPR format {fmt!r}; choose one of {', '.join(DPR_FORMATS)}")
        self.dpr_format = dpr_format
        # Stashes that a recomputation rebuilds other tensors from (recompute_sources) in this format
        # instead: their rounding error reaches every rebuilt tensor too (None: dpr_format like the rest).
        self.dpr_source_format = dpr_source_format
        self.min_bytes = min_bytes
        self.consumers = consumers  # None: any backward reader; else only stashes read solely by these ops
        # fp16 with ONNX's own Clip + Cast: the same values (±Inf aside), no PyOp bridge copies.
        self.native = native

    @property
    def codec(self) -> str:
        return f"dpr_{self.dpr_format}"

    def format_for(self, analysis: GraphAnalysis, stash: StashedTensor) -> str:
        """dpr_source_format for a stash a recomputation is rebuilt from, dpr_format otherwise."""
        if self.dpr_source_format is not None and feeds_recompute(analysis, stash):
            return self.dpr_source_format
        return self.dpr_format

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops import get_codec

        problem = self.float_stash_problem(stash, self.min_bytes)
        if problem:
            return problem
        if self.consumers is not None and not set(stash.backward_consumer_ops) <= set(self.consumers):
            return f"backward reader(s) {sorted(set(stash.backward_consumer_ops))} not in {list(self.consumers)}"
        shape = tuple(stash.shape)
        fmt = self.format_for(analysis, stash)
        why = " (recompute source)" if fmt != self.dpr_format else ""
        if self.native and fmt == "fp16":
            n = 2 * numel(shape)
            return Encoding(stash.name, stash.name, stash.name, "dpr_fp16", {}, [n], [list(shape)],
                            f"fp16: 16 bits/value (ONNX Clip + Cast){why}", native="fp16")
        codec = get_codec(f"dpr_{fmt}")
        packed = codec.predicted_nbytes(shape) - 8 * len(shape)
        # The int64 shape payload is declared with a symbolic length (docs/coverage.md: static int64[ndim]
        # outputs beside the anchor abort ORT's memory-reuse planner). The packed codes are declared static:
        # of unknown length, ORT allocates them outside its memory pattern, and under its default settings
        # the first such allocation makes the arena hold the pattern block twice (passes/arena_scratch.py).
        itemsize = np.dtype(codec.payload_dtypes[0]).itemsize
        return Encoding(stash.name, stash.name, stash.name, f"dpr_{fmt}", {}, [packed, 8 * len(shape)],
                        [[packed // itemsize], None], f"{fmt}: {_BITS[fmt]:.3g} bits/value{why}")


def feeds_recompute(analysis: GraphAnalysis, stash: StashedTensor) -> bool:
    """Whether a recomputation reads this stash: one of its backward readers has no incoming gradient of its
    own yet waits on one through its backward-made inputs, i.e. is no gradient op but a recompute clone's
    gate (passes/recompute.py, encode_stash.decoder_trigger), through which the stash is the input forward
    ops are rebuilt from (a LayerNorm input → its output → Q/K/V, the GELU input)."""
    from .encode_stash import decoder_trigger

    return any(analysis.incoming_gradient(c, stash.name) is None and decoder_trigger(analysis, c, stash.name)
               is not None for c in stash.backward_consumers)
