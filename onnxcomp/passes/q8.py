"""Pass: hold float stashes as 8-bit affine codes per channel (Mesa-style ``q8`` codec, custom_ops/q8.py).

Takes the float stashes DPR would take (the analysis's ``dpr`` role: a lossy copy is acceptable for every
backward reader). Groups: the rows of a MatMul/Gemm input (every axis but the last), the channels (axis 1)
of anything else with a channel axis (NCHW conv and BatchNorm inputs). Each group keeps its min and scale
((max − min)/255), so an element is off by at most half a step of its own channel's range.
"""
from __future__ import annotations

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import DPR
from .encode_stash import EncodeStashPass, Encoding

_ROW_READERS = {"MatMul", "FusedMatMul", "Gemm"}   # they contract the last axis: quantise along it
META_DTYPES = {"float32": "q8", "float16": "q8h"}


class Q8Pass(EncodeStashPass):
    name = "q8"
    encoding = "q8"

    def __init__(self, min_bytes: int = 64 * 1024, meta: str = "float32") -> None:
        if meta not in META_DTYPES:
            raise ValueError(f"q8 meta must be one of {', '.join(META_DTYPES)}, got {meta!r}")
        self.min_bytes = min_bytes
        self.codec = META_DTYPES[meta]

    def applies(self, stash: StashedTensor) -> bool:
        return DPR in stash.encodings

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops import get_codec
        from ..custom_ops.q8 import groups

        problem = self.float_stash_problem(stash, self.min_bytes)
        if problem:
            return problem
        shape = tuple(stash.shape)
        rows = len(shape) < 3 or bool(set(stash.backward_consumer_ops) & _ROW_READERS)
        layout = "rows" if rows else "channels"
        _, g, _ = groups(shape, layout)
        meta = 2 * g * (2 if self.codec == "q8h" else 4)
        total = get_codec(self.codec).predicted_nbytes(shape, layout=layout)
        # The int64 shape payload is left symbolic (see signbits._payload_shapes: ORT's buffer-reuse planner).
        return Encoding(stash.name, stash.name, stash.name, self.codec, {"layout": layout},
                        [numel(shape), meta // 2, meta // 2, 8 * len(shape)], [[numel(shape)], [g], [g], None],
                        f"q8 per {'row' if rows else 'channel'} ({g} groups): "
                        f"{8 * total / max(numel(shape), 1):.3g} bits/value")
