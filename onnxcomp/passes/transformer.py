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
import onnx_ir as ir

from ..analysis import GraphAnalysis, StashedTensor, TensorClass, analysis_of, numel
from ..analysis.patterns import BITMASK, RECOMPUTE
from .base import OnnxcompPass, PassOutcome, Skipped
from .early_weight_grad import EarlyWeightGradientPass
from .editor import IrGraphEditor, ir_taken_names
from .encode_stash import EncodeStashPass, Encoding, already_encoded, decoder_trigger
from .recompute import CHEAP_OPS, RecomputePass, replace_input
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


# A linear layer's output seen through the data movement after it (bias Add, the head split's Split /
# Reshape / Transpose): what LinearRecomputePass rebuilds.
_LINEAR = frozenset({"MatMul", "Gemm"})
_AFTER_LINEAR = frozenset({"Add", "Split", "Slice", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity"})


def made_by_linear(graph: onnx.GraphProto, analysis: GraphAnalysis, name: str, steps: int = 6) -> bool:
    """Whether forward tensor ``name`` is a MatMul / Gemm output seen through bias Adds and views."""
    for _ in range(steps):
        t = analysis.tensors.get(name)
        if t is None or t.producer is None or analysis.boundary.is_backward(t.producer):
            return False
        node = graph.node[t.producer]
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type in _LINEAR:
            return True
        if node.op_type not in _AFTER_LINEAR:
            return False
        # The data path: the input that is not a parameter or a shape (Add's bias, Reshape's shape).
        data = [i for i in node.input[:2 if node.op_type == "Add" else 1]
                if i and (t := analysis.tensors.get(i)) is not None and t.producer is not None
                and graph.node[t.producer].op_type != "Constant"]
        if len(data) != 1:
            return False
        name = data[0]
    return False


def parameter_view(graph: onnx.GraphProto, analysis: GraphAnalysis, name: str) -> bool:
    """Whether forward tensor ``name`` is a Transpose / Reshape of a parameter (ORT keeps Wᵀ for dX)."""
    t = analysis.tensors.get(name)
    if t is None or t.producer is None or analysis.boundary.is_backward(t.producer):
        return False
    node = graph.node[t.producer]
    source = analysis.tensors.get(node.input[0]) if node.input else None
    return (node.domain in ("", "ai.onnx") and node.op_type in ("Transpose", "Reshape", "Identity")
            and source is not None and source.cls in (TensorClass.PARAMETER, TensorClass.CONSTANT))


class LinearRecomputePass(RecomputePass):
    """Linear layers' outputs rebuilt in backward from their (kept) inputs: activation checkpointing of the
    MLP's first product (the GELU input, read by GeluGrad: 4·dim floats per token, the largest stash of a
    block) and of the qkv product behind Q, K, V (read by the attention backward), from the LayerNorm input
    that LayerNormalizationGrad keeps anyway. The chain LayerNorm → MatMul → bias Add (→ Split → Reshape →
    Transpose) is cloned just before the first backward reader, gated on its dY like every clone; the same
    ops on the same inputs, so bit-identical. Costs one more product per rebuilt layer in backward (qkv and
    fc1: about a third of a block's forward FLOPs). The transposed weights ORT keeps for dX = dY·W are
    rebuilt from the parameter too (under the lossy policies nothing else takes them, and DPR would hold
    a weight in reduced precision)."""

    name = "recompute_linear"

    def __init__(self, min_bytes: int = 64 * 1024, max_depth: int = 7) -> None:
        super().__init__(ops=CHEAP_OPS | TRANSFORMER_CHEAP_OPS | _MS_PURE | _LINEAR | {"Split", "Slice"},
                         min_bytes=min_bytes, max_depth=max_depth)

    def _reject(self, analysis: GraphAnalysis, stash: StashedTensor) -> str | None:
        if stash.dtype != "float32":
            return f"dtype {stash.dtype}: linear layers' float outputs only"
        graph = analysis.model.graph
        if not made_by_linear(graph, analysis, stash.name) and not parameter_view(graph, analysis, stash.name):
            return "not a MatMul / Gemm output (seen through bias Add and views) nor a view of a parameter"
        return super()._reject(analysis, stash)

    def _candidates(self, analysis: GraphAnalysis, skipped: list[Skipped]):
        # Weight views first: a linear output's chain then clones Wᵀ from the parameter instead of reading
        # (and so keeping) the forward Wᵀ.
        candidates, replacing = super()._candidates(analysis, skipped)
        graph = analysis.model.graph
        candidates.sort(key=lambda s: not parameter_view(graph, analysis, s.name))
        return candidates, replacing

    def _trigger(self, analysis: GraphAnalysis, consumer: int, name: str) -> str | None:
        # The first reader may be another clone's gate (the GELU output's, reading the GELU input): no float
        # input, but it waits on a gradient, and so can these clones.
        return decoder_trigger(analysis, consumer, name)

    def _op_problem(self, node: onnx.NodeProto) -> str | None:
        if node.domain == MS_DOMAIN and node.op_type in _MS_PURE:
            return None
        return super()._op_problem(node)


class AttentionDropoutRecomputePass(OnnxcompPass):
    """Attention probabilities after dropout, rebuilt as DropoutGrad(softmax output, mask, ratio)."""

    name = "recompute_attention_dropout"

    def __init__(self, min_bytes: int = 64 * 1024) -> None:
        self.min_bytes = min_bytes

    def call(self, model: ir.Model) -> PassOutcome:
        analysis = analysis_of(model)
        outcome = PassOutcome(model, False)
        graph = model.graph
        nodes = list(graph)     # index = the analysis' node index
        stashes = {s.name: s for s in analysis.stashed}
        taken = ir_taken_names(graph)
        inserts: list[tuple[ir.Node, list[ir.Node]]] = []
        for stash in analysis.stashed:
            if stash.pattern.split("→")[0] != "Dropout-output" or RECOMPUTE not in stash.encodings:
                continue
            why = self._problem(analysis, stash, stashes)
            if why:
                outcome.skipped.append(Skipped(stash.name, stash.pattern, why))
                continue
            reader = nodes[min(stash.backward_consumers)]
            inserts.append((reader, _rebuild_dropout(graph, nodes, analysis, stash, taken)))
            outcome.records.append(PassRecord("recomputed", self.name, stash.name, {
                "tensor": stash.name, "pattern": stash.pattern, "encoding": RECOMPUTE, "codec": None,
                "original_bytes": stash.nbytes, "predicted_bytes": 0, "payload": {}, "shape": list(stash.shape),
                "note": "DropoutGrad(softmax output, mask, ratio) just before its reader"}))
        # Just before each reader (two rebuilt for one reader: the later stash's nodes first, as before).
        for reader, new_nodes in reversed(inserts):
            graph.insert_before(reader, new_nodes)
        if inserts:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
            outcome.modified = True
        return outcome

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
        if analysis.incoming_gradient(first, stash.name) is None:
            return "its first backward reader has no incoming gradient to time the recomputation by"
        return None


def _rebuild_dropout(graph: ir.Graph, nodes: list[ir.Node], analysis: GraphAnalysis, stash: StashedTensor,
                     taken: set[str]) -> list[ir.Node]:
    """DropoutGrad(softmax output, mask, gated ratio) for ``stash`` (a Dropout's output), its backward
    readers rewired to it; returns the new nodes, which go just before the first reader."""
    dropout = nodes[stash.producer]
    first = min(stash.backward_consumers)
    d_y_name = analysis.incoming_gradient(first, stash.name)
    d_y = next(v for v in nodes[first].inputs if v is not None and v.name == d_y_name)
    editor = IrGraphEditor(graph, taken, f"{stash.name.replace('/', '_').strip('_')}__recomputed")
    # The clone reads the ratio through the editor's gate on the reader's dY (a zero-copy view that
    # exists only once dY does): exact, and ORT cannot run it before dY exists, under either order.
    # The gated ratio is a float the clone reads, so later passes (bits for the mask, DPR for the
    # softmax output) see a reader with a gradient input and time their decoders by it. Viewed as
    # [1], not as a scalar: the gate's shape + zero of a scalar would be the shape [0].
    # DropoutGrad reads any one-element ratio.
    ratio = editor.gate(dropout.inputs[1], after=d_y, after_elem=ir.DataType.FLOAT, shape=[1],
                        elem=ir.DataType.FLOAT)
    rebuilt = editor.op("DropoutGrad", [dropout.inputs[0], dropout.outputs[1], ratio, dropout.inputs[2]], "value",
                        ir.DataType.FLOAT, list(stash.shape), domain=MS_DOMAIN)
    original = next(v for v in dropout.outputs if v.name == stash.name)
    for c in stash.backward_consumers:
        replace_input(nodes[c], original, rebuilt)
    return editor.nodes


# Exact transformer passes, in order: weight gradients moved early (their inputs then die early and the
# LayerNorm inputs are still alive to rebuild LayerNorm outputs from), the recomputations (the mask's first backward reader is then
# the rebuilt dropout, gated on dY), then the masks as bits.
# Linear outputs last: Q, K, V are then read by the rebuilt probabilities' clones too, and the GELU input's
# chain may start from the LayerNorm input the LayerNorm clones read.
TRANSFORMER_RECOMPUTE: tuple[type[OnnxcompPass], ...] = (
    EarlyWeightGradientPass, TransformerRecomputePass, AttentionDropoutRecomputePass, AttentionProbsRecomputePass,
    LinearRecomputePass)
TRANSFORMER_EXACT: tuple[type[OnnxcompPass], ...] = (*TRANSFORMER_RECOMPUTE, DropoutMaskPass)
