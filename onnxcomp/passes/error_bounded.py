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
