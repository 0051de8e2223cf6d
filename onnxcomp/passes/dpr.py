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
                 consumers: tuple[str, ...] | None = None, native: bool = True) -> None:
        if dpr_format not in DPR_FORMATS:
            raise ValueError(f"unknown DPR format {dpr_format!r}; choose one of {', '.join(DPR_FORMATS)}")
        self.dpr_format = dpr_format
        self.min_bytes = min_bytes
        self.consumers = consumers  # None: any backward reader; else only stashes read solely by these ops
        # fp16 with ONNX's own Clip + Cast: the same values (±Inf aside), no PyOp bridge copies.
        self.native = native and dpr_format == "fp16"

    @property
    def codec(self) -> str:
        return f"dpr_{self.dpr_format}"

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops import get_codec

        problem = self.float_stash_problem(stash, self.min_bytes)
        if problem:
            return problem
        if self.consumers is not None and not set(stash.backward_consumer_ops) <= set(self.consumers):
            return f"backward reader(s) {sorted(set(stash.backward_consumer_ops))} not in {list(self.consumers)}"
        shape = tuple(stash.shape)
        if self.native:
            n = 2 * numel(shape)
            return Encoding(stash.name, stash.name, stash.name, self.codec, {}, [n], [list(shape)],
                            "fp16: 16 bits/value (ONNX Clip + Cast)", native="fp16")
        codec = get_codec(self.codec)
        packed = codec.predicted_nbytes(shape) - 8 * len(shape)
        # The int64 shape payload is declared with a symbolic length (docs/coverage.md: static int64[ndim]
        # outputs beside the anchor abort ORT's memory-reuse planner). The packed codes are declared static:
        # of unknown length, ORT allocates them outside its memory pattern, and under its default settings
        # the first such allocation makes the arena hold the pattern block twice (passes/arena_scratch.py).
        itemsize = np.dtype(codec.payload_dtypes[0]).itemsize
        return Encoding(stash.name, stash.name, stash.name, self.codec, {}, [packed, 8 * len(shape)],
                        [[packed // itemsize], None], f"{self.dpr_format}: {_BITS[self.dpr_format]:.3g} bits/value")
