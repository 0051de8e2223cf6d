"""Pass: compute large weight gradients at the end of backward, when the stashed activations are gone.

A fully connected layer's backward is two independent products: dX = dY·W (needed at once, to carry on
backward) and dW = dYᵀ·X (needed only by its gradient accumulator). ORT computes both as soon as dY exists,
at the very start of backward, when every stashed activation of the network is still alive. For VGG-16's
first classifier layer at 64×64, dW is 4096×25088 floats (392 MiB) — more than all its stashed activations
together, and no activation encoding can shrink it. Its inputs are small (batch×4096 and batch×25088), so
holding them until the end of backward and computing dW there costs a few MiB and moves the 392 MiB
transient to the point where little else is alive.

Ordering: the deferred producer reads dY through ``Reshape(dY, shape + Cast(Less(t, t), int64))``, where ``t``
is one element of the *anchor*: the weight gradient with the most backward ancestors (the first layer's,
computed last). ``Less(t, t)`` is false for every value, so the view is exact and zero-copy, but neither of
ORT's execution orders can run it before the anchor exists (the same gate the recompute pass uses). The
producer and its gate are placed right after the anchor's producer in the node list (PRIORITY_BASED order);
EagerAccumulationPass, run after this one, places the accumulator right behind it and orders the
accumulators for the DEFAULT order.

Deferral is kept only where the planner predicts a lower training-step peak (moving a gradient to the end
can also raise a late peak, e.g. a small fc dW on top of a large first-layer decode). Values are untouched:
the same kernel runs on the same inputs, so losses and parameters stay bit-identical.
"""
from __future__ import annotations

import onnx
from onnx import helper

from ..analysis import GraphAnalysis, analysis_of, analyze_model
from ..errors import OnnxcompError
from .base import GraphPass, PassResult, Skipped, check_model, require_training_graph
from .editor import GraphEditor
from .records import PassRecord
from .eager_accumulation import ACCUMULATORS, CHAIN_PREFIX

DEFAULT_MIN_BYTES = 1 << 20
# Names of everything this pass adds: a re-run recognises deferred producers by their gated input.
GATE_SUFFIX = "__deferred_gated"


class DeferWeightGradientPass(GraphPass):
    """min_bytes: smallest weight gradient worth deferring. force: defer every candidate without asking
    the planner (for tests and measurements)."""

    name = "defer_weight_grad"

    def __init__(self, min_bytes: int = DEFAULT_MIN_BYTES, force: bool = False) -> None:
        if min_bytes < 0:
            raise OnnxcompError(f"DeferWeightGradientPass min_bytes must be >= 0 (got {min_bytes})")
        self.min_bytes = min_bytes
        self.force = force

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        result = PassResult(self.copy(model))
        analysis = analysis_of(model)
        anchor = _anchor_gradient(analysis)
        if anchor is None:
            return result
        candidates, skipped = _candidates(analysis, anchor, self.min_bytes)
        result.skipped.extend(skipped)
        if not candidates:
            return result
        from ..planner.predict import predicted_peak

        current = result.model
        peak = None if self.force else predicted_peak(current)
        for producer_name, nbytes in candidates:
            trial = _defer(current, producer_name, anchor)
            record: dict[str, object] = {"producer": producer_name, "gradient_bytes": nbytes,
                                         "after": anchor, "pass": self.name}
            if peak is not None:
                new_peak = predicted_peak(trial)
                record.update(predicted_peak_before=peak, predicted_peak_after=new_peak)
                if new_peak >= peak:
                    result.skipped.append(Skipped(producer_name, "weight gradient",
                                                  f"deferring it would not lower the predicted peak "
                                                  f"({peak / 2**20:.1f} -> {new_peak / 2**20:.1f} MiB)"))
                    continue
                peak = new_peak
            current = trial
            result.records.append(PassRecord("deferred", self.name, producer_name, record))
        if result.records:
            check_model(current, "defer_weight_grad pass")
        result.model = current
        return result


def _ancestor_counts(analysis: GraphAnalysis) -> list[int]:
    """Number of ancestor nodes of every node (bitsets as Python ints; node list is topological)."""
    nodes = analysis.nodes
    masks: list[int] = []
    for i, node in enumerate(nodes):
        m = 0
        for name in node.input:
            t = analysis.tensors.get(name) if name else None
            if t is not None and t.producer is not None:
                m |= masks[t.producer] | (1 << t.producer)
        masks.append(m)
    return [bin(m).count("1") for m in masks]


def _accumulated(analysis: GraphAnalysis) -> list[tuple[str, int]]:
    """(gradient tensor, producer index) for every accumulator whose gradient is computed in the graph."""
    out = []
    for node in analysis.nodes:
        if node.op_type in ACCUMULATORS and len(node.input) > 1:
            t = analysis.tensors.get(node.input[1])
            if t is not None and t.producer is not None:
                out.append((node.input[1], t.producer))
    return out


def _anchor_gradient(analysis: GraphAnalysis) -> str | None:
    """The accumulated gradient computed last in every order: the one with the most ancestors."""
    grads = _accumulated(analysis)
    if not grads:
        return None
    counts = _ancestor_counts(analysis)
    return max(grads, key=lambda g: (counts[g[1]], g[1]))[0]


def _candidates(analysis: GraphAnalysis, anchor: str,
                min_bytes: int) -> tuple[list[tuple[str, int]], list[Skipped]]:
    """Producers (by node name) whose every output feeds only accumulators, biggest gradient first."""
    nodes = analysis.nodes
    anchor_producer = analysis.tensors[anchor].producer
    seen: set[int] = set()
    found: list[tuple[str, int]] = []
    skipped: list[Skipped] = []
    for grad, idx in _accumulated(analysis):
        if idx in seen or idx == anchor_producer:
            continue
        seen.add(idx)
        node = nodes[idx]
        outs = [analysis.tensors[o] for o in node.output if o and o in analysis.tensors]
        if any(nodes[c].op_type not in ACCUMULATORS for t in outs for c in t.consumers):
            continue   # e.g. ConvGrad: dW comes with dX, which backward needs at once
        if any(i.endswith(GATE_SUFFIX) for i in node.input):
            continue   # already deferred by an earlier run
        nbytes = sum(t.nbytes for t in outs)
        held = sum(analysis.tensors[i].nbytes for i in node.input if i in analysis.tensors)
        if nbytes < min_bytes:
            continue
        if nbytes <= held:
            skipped.append(Skipped(grad, "weight gradient", f"its inputs ({held} B) are not smaller than the "
                                   f"gradient ({nbytes} B): holding them to the end would cost more"))
            continue
        if _gate_input(analysis, node) is None:
            skipped.append(Skipped(grad, "weight gradient", "no float input of static shape to gate on"))
            continue
        found.append((node.name, nbytes))
    found.sort(key=lambda c: -c[1])
    return found, skipped


def _gate_input(analysis: GraphAnalysis, node: onnx.NodeProto) -> int | None:
    """Index of the input to gate: a float tensor with a static shape produced in the graph (dY)."""
    for k, name in enumerate(node.input):
        t = analysis.tensors.get(name) if name else None
        if t is not None and t.producer is not None and t.shape is not None and t.type.dtype.kind == "f":
            return k
    return None


def _defer(model: onnx.ModelProto, producer_name: str, anchor: str) -> onnx.ModelProto:
    """A copy of ``model`` with ``producer_name`` gated on ``anchor`` and moved right after its producer."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    analysis = analyze_model(out)
    graph = out.graph
    nodes = [n for n in graph.node]
    idx = next(i for i, n in enumerate(nodes) if n.name == producer_name)
    node = nodes[idx]
    k = _gate_input(analysis, node)
    assert k is not None
    gated, elem_anchor = node.input[k], analysis.tensors[anchor]
    shape = list(analysis.tensors[gated].shape)
    editor = GraphEditor(graph, prefix=gated.replace("/", "_").strip("_") + "__deferred")
    view = editor.gate(gated, after=anchor, shape=shape, elem=helper.np_dtype_to_tensor_dtype(
        analysis.tensors[gated].type.dtype), after_elem=helper.np_dtype_to_tensor_dtype(elem_anchor.type.dtype),
        name=f"{gated}{GATE_SUFFIX}")
    gate = editor.nodes
    graph.value_info.extend(editor.infos)
    node.input[k] = view
    # The producer and its accumulators move behind the anchor's producer (and its accumulator, if eager).
    moving = [node] + [n for n in nodes if n.op_type in ACCUMULATORS and any(o in n.input for o in node.output)]
    chain = [n for n in nodes if n.op_type == "And" and n.name.startswith(CHAIN_PREFIX)]
    rest = [n for n in nodes if not any(n is m for m in moving + chain)]
    pos = next(i for i, n in enumerate(rest) if anchor in n.output) + 1
    while pos < len(rest) and rest[pos].op_type in ACCUMULATORS and anchor in rest[pos].input:
        pos += 1
    new_nodes = rest[:pos] + gate + moving + rest[pos:]
    del graph.node[:]
    graph.node.extend(new_nodes)
    if chain:   # the accumulator order changed: rebuild the order chain for it
        from .eager_accumulation import EagerAccumulationPass

        out = EagerAccumulationPass().run(out).model
    return out
