"""Pass: hold conv, fully-connected and MatMul inputs with the error-bounded SZ codec (COMET).

A conv's stashed input X is read in backward only for the weight gradient dW = dY ⋆ X, so an error e in X
reaches nothing but dW, as Σ dY·e (COMET §4.2). A MatMul's (transformer linear's) input X likewise, when
its backward readers compute only dW = Xᵀ·dY (ORT's MatMul gradient: Gemm(transA) on X viewed 2-D): each
dW value sums ``summed`` = numel(X) / K products dY·e (every row of every batch and position), which the
encoder's params carry for the controller. The weight may reach the MatMul through a Transpose (torch's
Linear exports ``MatMul(x, Transpose(W))``); the controller reads the parameter's gradient. Each encoder gets a ``key`` and starts from ``eb``; with
``adaptive`` the run-time controller (onnxcomp.runtime.controller) retunes the bound from the layer's
nonzero ratio, rms of dY (the decoder is triggered by ReduceL2(dY) to see it) and weight-gradient scale,
without rebuilding the session.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import onnx

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import ERROR_BOUNDED
from .encode_stash import EncodeStashPass, Encoding

# Backward readers for which X only feeds the weight gradient.
_WEIGHT_GRAD_READERS = {"ConvGrad", "Gemm", "MatMul"}
_FORWARD_LAYERS = {"Conv", "Gemm", "MatMul"}
_PASS_THROUGH = {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}
# Between a parameter and the layer that reads it (torch's Linear: MatMul(x, Transpose(W))).
_WEIGHT_VIEWS = _PASS_THROUGH | {"Transpose"}
HEADER_BYTES = 16
# Payload planned (and, with a cap, held at most) over the size of the sampled stash at the starting bound:
# room for the controller to tighten the bound about 1.2x (a halving costs a bit per value) before the cap
# loosens it.
SZ_HEADROOM = 1.25
SAMPLE_ELEMENTS = 1 << 18


class ErrorBoundedPass(EncodeStashPass):
    name = "error_bounded"
    encoding = ERROR_BOUNDED

    def __init__(self, eb: float = 1e-3, adaptive: bool = True, min_bytes: int = 64 * 1024,
                 cap_payload: bool = False, headroom: float = SZ_HEADROOM) -> None:
        from ..custom_ops import get_codec

        get_codec("sz").validate_params(eb=eb)  # the op's own check: refused now, not at the first step
        if not headroom >= 1.0:
            raise ValueError(f"headroom must be >= 1 (payload cap over the sampled size), got {headroom!r}")
        self.eb = eb
        self.adaptive = adaptive
        self.min_bytes = min_bytes
        # cap_payload (the budget planner's variant): the encoder never holds more than the predicted payload
        # (it loosens eb instead, runtime/bounds.encode_capped), so a budget that counts it holds.
        self.cap_payload = cap_payload
        self.headroom = headroom

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
        other = layer.input[1] if layer.input[0] == seen_as else layer.input[0]
        weight = _parameter_behind(analysis, other)
        if weight is None:
            return (f"the {layer.op_type}'s other operand {other!r} is no parameter (an activation product, "
                    "e.g. attention): no weight gradient to scale the bound by")
        shape = tuple(stash.shape)
        params = {"eb": self.eb, "key": stash.name, "weight": weight, "batch": int(shape[0]),
                  "adaptive": self.adaptive}
        if layer.op_type != "Conv":
            params["summed"] = summed_products(shape, x_first=layer.input[0] == seen_as)
        sizes = predicted_payload(shape, self.eb, self.headroom)
        if self.cap_payload:
            params["max_bytes"] = sum(sizes)
        return Encoding(stash.name, stash.name, stash.name, "sz", params, sizes, [],
                        f"eb {self.eb:g} {'adaptive' if self.adaptive else 'static'}; layer {layer.name or layer.op_type}"
                        + (f"; payload ≤ {8 * sum(sizes) / max(numel(shape), 1):.3g} bits/value (cap)"
                           if self.cap_payload else ""),
                        trigger="l2")


def predicted_payload(shape: tuple[int, ...], eb: float, headroom: float = SZ_HEADROOM) -> list[int]:
    """Bytes per payload array (``sz.payload_names``) of a stash of ``shape`` encoded at ``eb``, ``headroom``
    times the sampled size: sz's size depends on the data, so it is measured by encoding a sample
    (``sampled_stats``) rather than assumed. With a cap the encoder keeps the total (runtime/bounds.py)."""
    from ..custom_ops import get_codec

    codec = get_codec("sz")
    n = numel(shape)
    stats = sampled_stats(eb, min(n, SAMPLE_ELEMENTS))
    fixed = {"header": HEADER_BYTES, "rates": -(-n // 32), "outlier_idx": 0, "outlier_bits": 0,
             "shape": 8 * len(shape)}
    data = codec.predicted_nbytes(shape, **stats) - sum(fixed.values())
    fixed["data"] = int(math.ceil(data * headroom))
    return [fixed[name] for name in codec.payload_names]


@functools.lru_cache(maxsize=256)
def sampled_stats(eb: float, n: int) -> dict[str, float]:
    """``sz_stats`` of a synthetic stash of ``n`` elements at ``eb``: ReLU'd unit normals, the distribution of a
    BatchNorm–ReLU output (the conv inputs sz takes; half zeros). Independent samples have larger neighbour
    differences than real feature maps, so the Lorenzo deltas, hence the size, err on the large side."""
    from ..custom_ops.sz import sz_stats

    x = np.maximum(np.random.default_rng(0).standard_normal(n, dtype=np.float32), 0)
    return sz_stats(x, eb)


def summed_products(shape: tuple[int, ...], x_first: bool) -> int:
    """How many dY·X products one weight-gradient value sums, for a MatMul/Gemm input X of ``shape`` read
    with a shared 2-D weight: every element of X but those along the contracted axis (the last for
    ``X·W``, the second last for ``W·X``), i.e. rows × batch × positions."""
    return max(1, numel(shape) // max(1, shape[-1] if x_first or len(shape) < 2 else shape[-2]))


def _parameter_behind(analysis: GraphAnalysis, name: str) -> str | None:
    """The graph input (trainable parameter) ``name`` is a view of, through Transpose/reshapes; None if it
    is computed from anything else."""
    graph = analysis.model.graph
    graph_inputs = {i.name for i in graph.input}
    for _ in range(8):
        if name in graph_inputs:
            return name
        t = analysis.tensors.get(name)
        if t is None or t.producer is None:
            return None
        node = graph.node[t.producer]
        if node.op_type not in _WEIGHT_VIEWS:
            return None
        name = node.input[0]
    return None


def _forward_layer(analysis: GraphAnalysis, name: str) -> tuple[onnx.NodeProto, str] | None:
    """The Conv/Gemm/MatMul that reads ``name`` in forward, looking through reshapes (e.g. earlier passes'
    anchors, Flatten before a classifier) on either side: ORT's MatMul gradient reads the layer input
    viewed 2-D (``A_reshape_2d``), a view made from the tensor the MatMul reads. With the name it reads
    the tensor under."""
    graph = analysis.model.graph
    frontier, seen = [name], set()
    t = analysis.tensors.get(name)
    while t is not None and t.producer is not None and graph.node[t.producer].op_type in _PASS_THROUGH:
        source = graph.node[t.producer].input[0]   # the view's source: its forward readers count too
        frontier.append(source)
        t = analysis.tensors.get(source)
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
