"""Pass: hold float stashes with the fixed-rate ``zfp`` codec (CSWAP+, FreeLunch) at ``rate`` bits per value.

Where DPR applies (float stashes no lossless encoding took: conv inputs, BatchNorm inputs, ...), the stash is
encoded after its producer and decoded just before its backward reader, like DprPass. A fixed rate makes the
payload size a function of the shape alone, so the planner's figure is exact before any data is seen (SZ's
is a guess). Tensors whose 4×4 padding would eat the saving (e.g. 1×1 or 2×2 maps that survive the size-1
squeeze) are left alone.
"""
from __future__ import annotations

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import DPR
from .encode_stash import EncodeStashPass, Encoding

FIXED_RATES = (4, 6, 8, 12, 16)
_MAX_PAYLOAD_SHARE = 0.75  # skip a stash whose payload would exceed this share of its float32 bytes


def payload_share(shape: tuple[int, ...], rate: int) -> float:
    """zfp payload bytes (no NaN/Inf) over the float32 tensor's bytes: rate / 32 plus the padding's cost."""
    from ..custom_ops import zfp

    n = numel(shape)
    return zfp.ZFP().predicted_nbytes(shape, rate=rate) / max(4 * n, 1)


class FixedRatePass(EncodeStashPass):
    name = "fixed_rate"
    encoding = "fixed_rate"

    def __init__(self, rate: int = 8, min_bytes: int = 64 * 1024) -> None:
        from ..custom_ops.zfp import check_rate

        self.rate = check_rate(rate)
        self.min_bytes = min_bytes

    def applies(self, stash: StashedTensor) -> bool:
        return DPR in stash.encodings  # a lossy float encoding is acceptable for every backward reader

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops import zfp

        problem = self.float_stash_problem(stash, self.min_bytes)
        if problem:
            return problem
        shape = tuple(int(d) for d in stash.shape)
        layout = zfp.layout_of(shape)
        words = zfp.data_words(layout, self.rate)
        payload = zfp.HEADER_BYTES + 4 * words + 8 * len(shape)
        share = payload_share(shape, self.rate)
        if share > _MAX_PAYLOAD_SHARE:
            return (f"4x4 blocks over {layout.height}x{layout.width} planes: payload {share:.0%} of the tensor at "
                    f"rate {self.rate}, not worth a codec")
        return Encoding(stash.name, stash.name, stash.name, "zfp", {"rate": self.rate},
                        [zfp.HEADER_BYTES, 4 * words, 0, 0, 8 * len(shape)],
                        [[zfp.HEADER_BYTES], [words], None, None, [len(shape)]],
                        f"zfp rate {self.rate}: {8 * payload / max(numel(shape), 1):.3g} bits/value "
                        f"with padding")
