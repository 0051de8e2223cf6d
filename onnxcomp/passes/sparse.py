"""Pass: hold sparse stashes (ReLU / pooled-ReLU outputs read by ConvGrad, Gemm, ...) in sparse form.

The stored form — ZVC bitmap+values, narrow-index CSR, or dense — is picked by the op on every call from
the tensor's actual nonzero count, so it is never larger than dense whatever the data does during training.
Predicted bytes use a measured density when the caller supplies one (``densities``), else ``assumed_density``.
"""
from __future__ import annotations

from ..analysis import GraphAnalysis, StashedTensor
from ..analysis.patterns import SPARSE
from .encode_stash import EncodeStashPass, Encoding

# Exact-arithmetic consumers: they read the values, so a lossless sparse form changes nothing.
_CONSUMERS = {"ConvGrad", "Gemm", "MatMul", "BatchNormalizationGrad", "MaxPoolGrad", "ReluGrad",
              # recompute clones in backward read the exact decoded copy like any forward op would
              "Add", "Relu", "BatchNormInternal", "MaxPool", "Concat"}


class SparsePass(EncodeStashPass):
    name = "sparse"
    encoding = SPARSE

    def __init__(self, densities: dict[str, float] | None = None, assumed_density: float = 0.5,
                 min_bytes: int = 64 * 1024) -> None:
        self.densities = densities or {}
        self.assumed_density = assumed_density
        self.min_bytes = min_bytes

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops.sparse_adaptive import SparseAdaptive

        problem = self.float_stash_problem(stash, self.min_bytes)
        if problem:
            return problem
        odd = {op for op in stash.backward_consumer_ops if op not in _CONSUMERS}
        if odd:
            return f"backward reader(s) {sorted(odd)} not known to be safe with a decoded copy"
        density = self.densities.get(stash.name, self.assumed_density)
        codec = SparseAdaptive()
        sizes = codec.predicted_payload(tuple(stash.shape), density=density)
        source = "measured" if stash.name in self.densities else "assumed"
        return Encoding(stash.name, stash.name, stash.name, "sparse", {}, sizes, [],
                        f"{source} density {density:.2f} → {codec.predicted_mode(tuple(stash.shape), density)}")
