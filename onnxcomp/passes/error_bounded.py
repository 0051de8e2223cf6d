"""Pass: hold conv (and fully-connected) inputs with the error-bounded SZ codec (COMET).

A conv's stashed input X is read in backward only for the weight gradient dW = dY ⋆ X, so an error e in X
reaches nothing but dW, as Σ dY·e (COMET §4.2). Each encoder gets a ``key`` and starts from ``eb``; with
``adaptive`` the run-time controller (onnxcomp.runtime.controller) retunes the bound from the layer's
nonzero ratio, rms of dY (the decoder is triggered by ReduceL2(dY) to see it) and weight-gradient scale,
without rebuilding the session.
"""
from __future__ import annotations

import onnx

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import ERROR_BOUNDED
from .encode_stash import EncodeStashPass, Encoding

# Backward readers for which X only feeds the weight gradient.
_WEIGHT_GRAD_READERS = {"ConvGrad", "Gemm", "MatMul"}
_FORWARD_LAYERS = {"Conv", "Gemm", "MatMul"}
_PASS_THROUGH = {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}


class ErrorBoundedPass(EncodeStashPass):
    name = "error_bounded"
    encoding = ERROR_BOUNDED

    def __init__(self, eb: float = 1e-3, adaptive: bool = True, min_bytes: int = 64 * 1024,
                 assumed_bits: float = 4.0, assumed_density: float = 0.5) -> None:
        from ..custom_ops import get_codec

        get_codec("sz").validate_params(eb=eb)  # the op's own check: refused now, not at the first step
        self.eb = eb
        self.adaptive = adaptive
        self.min_bytes = min_bytes
        # Size prediction before any data is seen: mean bit width of nonzero blocks, nonzero density.
        self.assumed_bits = assumed_bits
        self.assumed_density = assumed_density

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        from ..custom_ops import get_codec

        problem = self.float_stash_problem(stash, self.min_bytes)
        if problem:
            return problem
        readers = set(stash.backward_consumer_ops)
        if not readers <= _WEIGHT_GRAD_READERS:
            return f"read by {sorted(readers - _WEIGHT_GRAD_READERS)} in backward: not only a weight-gradient input"
        found = _forward_layer(analysis, stash.name)
        if found is None:
            return "no Conv/Gemm forward reader: not a layer input"
        layer, seen_as = found
        weight = layer.input[1] if layer.input[0] == seen_as else layer.input[0]
        shape = tuple(stash.shape)
        params = {"eb": self.eb, "key": stash.name, "weight": weight, "batch": int(shape[0]),
                  "adaptive": self.adaptive}
        codec = get_codec("sz")
        sizes = _predicted_payload(codec, shape, self.assumed_bits, self.assumed_density)
        return Encoding(stash.name, stash.name, stash.name, "sz", params, sizes, [],
                        f"eb {self.eb:g} {'adaptive' if self.adaptive else 'static'}; layer {layer.name or layer.op_type}",
                        trigger="l2")


def _predicted_payload(codec, shape: tuple[int, ...], bits: float, density: float) -> list[int | None]:  # noqa: ANN001
    """Per-payload-array bytes before any data is seen: assumed mean block bit width and density."""
    total = int(codec.predicted_nbytes(shape, mean_rate=bits, density=density))
    n = numel(shape)
    fixed = {"header": 16, "rates": -(-n // 32), "outlier_idx": 0, "outlier_bits": 0, "shape": 8 * len(shape)}
    data = total - sum(fixed.values())
    return [fixed.get(name, data) for name in codec.payload_names]


def _forward_layer(analysis: GraphAnalysis, name: str) -> tuple[onnx.NodeProto, str] | None:
    """The Conv/Gemm that reads ``name`` in forward, looking through reshapes (e.g. earlier passes' anchors,
    Flatten before a classifier); with the name it reads the tensor under."""
    graph = analysis.model.graph
    frontier, seen = [name], set()
    while frontier:
        t = frontier.pop()
        if t in seen or t not in analysis.tensors:
            continue
        seen.add(t)
        for c in analysis.tensors[t].consumers:
            if analysis.boundary.is_backward(c):
                continue
            node = graph.node[c]
            if node.op_type in _FORWARD_LAYERS:
                return node, t
            if node.op_type in _PASS_THROUGH:
                frontier.append(node.output[0])
    return None
