"""Passes for transformer training graphs (ORT's LayerNormalization, Gelu, Softmax, Dropout gradients).

What ORT's gradient builder stashes per pre-norm block, and what is done with it (exact unless noted):

- ``Dropout-mask→DropoutGrad``: the keep-mask, one byte per element; for attention dropout it is
  batch·heads·T² bytes. ``DropoutMaskPass`` holds it as bits (codec ``bitmask``): DropoutGrad reads the
  same booleans, bit-identical.
- ``Dropout-output→(Fused)MatMul`` (attention probabilities after dropout, read for dV = Pᵀ·dO):
  ``AttentionDropoutRecomputePass`` rebuilds it from the softmax output (kept anyway for SoftmaxGrad) and
  the mask (kept for DropoutGrad) with ORT's own ``DropoutGrad(P, mask, ratio)``, whose kernel is the
  forward's ``x · mask · 1/(1-ratio)``: bit-identical, and one of the two T² float tensors is gone.
- ``LayerNorm-output→Gemm`` and ``Gelu-output→Gemm`` (the inputs of qkv / fc1 and fc2, read for the weight
  gradient): ``TransformerRecomputePass`` clones LayerNormalization / Gelu (plus the views after them)
  from their inputs, which LayerNormalizationGrad and GeluGrad keep anyway — the recompute pass's
  machinery, gated on the reader's dY like every clone (passes/recompute.py).
- ``Softmax-output→SoftmaxGrad`` (the attention probabilities): ``AttentionProbsRecomputePass`` rebuilds
  them from Q and Kᵀ, which dQ / dK keep anyway (FlashAttention's backward idea, in ORT's ops).
- Weight gradients: ``EarlyWeightGradientPass`` (passes/early_weight_grad.py) runs first, so the LayerNorm
  inputs are still alive where the LayerNorm outputs are rebuilt.
- Left to the lossy policies: the GELU input (GeluGrad), the LayerNorm input (LayerNormalizationGrad), Q/K/V
  and the attention output (MatMul inputs): reduced precision (DPR).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ..analysis import GraphAnalysis, StashedTensor, analysis_of, numel
from ..analysis.patterns import BITMASK, RECOMPUTE
from .base import GraphPass, PassResult, Skipped, ensure_opset, require_training_graph
from .early_weight_grad import EarlyWeightGradientPass
from .editor import GraphEditor, taken_names
from .encode_stash import EncodeStashPass, Encoding, already_encoded
from .recompute import CHEAP_OPS, RecomputePass
from .records import PassRecord

MS_DOMAIN = "com.microsoft"
# Pure, deterministic transformer ops a clone may recompute (Gelu family lives in com.microsoft).
TRANSFORMER_CHEAP_OPS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})
_MS_PURE = frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu"})


class DropoutMaskPass(EncodeStashPass):
    """Dropout keep-masks (bool, one byte per element) held as one bit per element."""

    name = "dropout_mask"
    encoding = BITMASK
    codec = "bitmask"

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        if stash.dtype != "bool":
            return f"dtype {stash.dtype}: a Dropout mask is bool"
        if stash.shape is None:
            return "shape unresolved"
        n = numel(stash.shape)
        dropout = analysis.model.graph.node[stash.producer]
        # Forward readers of the Dropout's output wait on the encoder (the mask itself has none), so it
        # runs in the forward pass under either execution order.
        return Encoding(stash.name, stash.name, dropout.output[0], self.codec, {},
                        [(n + 7) // 8, 8 * len(stash.shape)], [[(n + 7) // 8], None],  # see signbits._payload_shapes
                        "Dropout mask: 1 bit/element (exact)")


class TransformerRecomputePass(RecomputePass):
    """RecomputePass that may also clone LayerNormalization and the Gelu family (exact, deterministic)."""

    name = "recompute_transformer"

    def __init__(self, min_bytes: int = 64 * 1024, max_depth: int = 4) -> None:
        super().__init__(ops=CHEAP_OPS | TRANSFORMER_CHEAP_OPS | _MS_PURE, min_bytes=min_bytes, max_depth=max_depth)

    def _reject(self, analysis: GraphAnalysis, stash: StashedTensor) -> str | None:
        if RECOMPUTE not in stash.encodings:
            return "not a LayerNorm / GELU output (what this pass rebuilds)"
        return super()._reject(analysis, stash)

    def _op_problem(self, node: onnx.NodeProto) -> str | None:
        if node.domain == MS_DOMAIN and node.op_type in _MS_PURE:
            return None
        return super()._op_problem(node)


class AttentionProbsRecomputePass(RecomputePass):
    """The softmax output (attention probabilities, batch·heads·T² floats) recomputed from Q and Kᵀ, which
    the dQ / dK products keep anyway: MatMul → Mul(scale) → Where(causal mask) → Softmax cloned just before
    its first backward reader (FlashAttention's backward idea, in ORT's own ops; same ops on the same
    inputs, so bit-identical). Costs one more Q·Kᵀ per layer in backward."""

    name = "recompute_attention"

    def __init__(self, min_bytes: int = 64 * 1024, max_depth: int = 5) -> None:
        super().__init__(ops=CHEAP_OPS | {"MatMul", "Where", "Softmax"}, min_bytes=min_bytes, max_depth=max_depth)

    def _reject(self, analysis: GraphAnalysis, stash: StashedTensor) -> str | None:
        if not stash.pattern.startswith("Softmax-output") or RECOMPUTE not in stash.encodings:
            return "not attention probabilities (what this pass rebuilds)"
        return super()._reject(analysis, stash)


class AttentionDropoutRecomputePass(GraphPass):
    """Attention probabilities after dropout, rebuilt as DropoutGrad(softmax output, mask, ratio)."""

    name = "recompute_attention_dropout"

    def __init__(self, min_bytes: int = 64 * 1024) -> None:
        self.min_bytes = min_bytes

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        analysis = analysis_of(model)
        result = PassResult(self.copy(model))
        graph = result.model.graph
        stashes = {s.name: s for s in analysis.stashed}
        taken = taken_names(graph)
        inserts: list[tuple[int, GraphEditor]] = []
        for stash in analysis.stashed:
            if stash.pattern.split("→")[0] != "Dropout-output" or RECOMPUTE not in stash.encodings:
                continue
            why = self._problem(analysis, stash, stashes)
            if why:
                result.skipped.append(Skipped(stash.name, stash.pattern, why))
                continue
            dropout = graph.node[stash.producer]
            first = min(stash.backward_consumers)
            reader = graph.node[first]
            d_y = next(i for i in reader.input if i and i != stash.name and _is_backward_float(analysis, i))
            b = GraphEditor(graph, taken, f"{stash.name.replace('/', '_').strip('_')}__recomputed")
            shape = list(stash.shape)
            # The clone reads the ratio through the editor's gate on the reader's dY (a zero-copy view that
            # exists only once dY does): exact, and ORT cannot run it before dY exists, under either order.
            # The gated ratio is a float the clone reads, so later passes (bits for the mask, DPR for the
            # softmax output) see a reader with a gradient input and time their decoders by it. Viewed as
            # [1], not as a scalar: the gate's shape + zero of a scalar would be the shape [0].
            # DropoutGrad reads any one-element ratio.
            ratio = b.gate(dropout.input[1], after=d_y, after_elem=TensorProto.FLOAT, shape=[1],
                           elem=TensorProto.FLOAT)
            rebuilt = b.op("DropoutGrad", [dropout.input[0], dropout.output[1], ratio, dropout.input[2]], "value",
                           TensorProto.FLOAT, shape, domain=MS_DOMAIN)
            for c in stash.backward_consumers:
                node = graph.node[c]
                node.input[:] = [rebuilt if i == stash.name else i for i in node.input]
            inserts.append((first, b))
            result.records.append(PassRecord("recomputed", self.name, stash.name, {
                "tensor": stash.name, "pattern": stash.pattern, "encoding": RECOMPUTE, "codec": None,
                "original_bytes": stash.nbytes, "predicted_bytes": 0, "payload": {}, "shape": shape,
                "note": "DropoutGrad(softmax output, mask, ratio) just before its reader"}))
        if inserts:
            nodes = list(graph.node)
            for at, b in sorted(inserts, key=lambda t: -t[0]):
                nodes[at:at] = b.nodes
            del graph.node[:]
            graph.node.extend(nodes)
            graph.value_info.extend(v for _, b in inserts for v in b.infos)
            ensure_opset(result.model, MS_DOMAIN, 1)
        return result

    def _problem(self, analysis: GraphAnalysis, stash: StashedTensor,
                 stashes: dict[str, StashedTensor]) -> str | None:
        graph = analysis.model.graph
        dropout = graph.node[stash.producer]
        if stash.nbytes < self.min_bytes:
            return f"only {stash.nbytes} bytes (< min_bytes {self.min_bytes})"
        if stash.shape is None or stash.dtype != "float32":
            return "shape unresolved or not float32"
        if already_encoded(analysis, stash.name):
            return "already encoded by another pass"
        if len(dropout.output) < 2 or len(dropout.input) < 3:
            return "Dropout without its mask output or ratio/training_mode inputs"
        first = min(stash.backward_consumers)
        probs, mask = stashes.get(dropout.input[0]), stashes.get(dropout.output[1])
        if probs is None or mask is None:
            return "the softmax output or the mask is not kept for backward anyway"
        # Both must still be alive at the reader: read again at or after it.
        if max(probs.backward_consumers) < first or max(mask.backward_consumers) < first:
            return "the softmax output or the mask is freed before the reader"
        if not any(_is_backward_float(analysis, i) for i in graph.node[first].input if i != stash.name):
            return "its first backward reader has no incoming gradient to time the recomputation by"
        return None


def _is_backward_float(analysis: GraphAnalysis, name: str) -> bool:
    t = analysis.tensors.get(name)
    return (t is not None and t.producer is not None and analysis.boundary.is_backward(t.producer)
            and t.type.dtype is not None and np.dtype(t.type.dtype).kind == "f")


# Exact transformer passes, in order: weight gradients moved early (their inputs then die early and the
# LayerNorm inputs are still alive to rebuild LayerNorm outputs from), the recomputations (the mask's first backward reader is then
# the rebuilt dropout, gated on dY), then the masks as bits.
TRANSFORMER_RECOMPUTE: tuple[type[GraphPass], ...] = (EarlyWeightGradientPass, TransformerRecomputePass,
                                                      AttentionDropoutRecomputePass, AttentionProbsRecomputePass)
TRANSFORMER_EXACT: tuple[type[GraphPass], ...] = (*TRANSFORMER_RECOMPUTE, DropoutMaskPass)
