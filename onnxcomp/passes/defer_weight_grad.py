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
import onnx_ir as ir
from onnx import helper

from ..analysis import GraphAnalysis, analysis_of
from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, Skipped
from .editor import IrGraphEditor
from .records import PassRecord
from .eager_accumulation import ACCUMULATORS, CHAIN_PREFIX, EagerAccumulationPass

DEFAULT_MIN_BYTES = 1 << 20
# Names of everything this pass adds: a re-run recognises deferred producers by their gated input.
GATE_SUFFIX = "__deferred_gated"


class DeferWeightGradientPass(OnnxcompPass):
    """min_bytes: smallest weight gradient worth deferring. force: defer every candidate without asking
    the planner (for tests and measurements)."""

    name = "defer_weight_grad"
    needs_static_parameters = True

    def __init__(self, min_bytes: int = DEFAULT_MIN_BYTES, force: bool = False) -> None:
        if min_bytes < 0:
            raise OnnxcompError(f"DeferWeightGradientPass min_bytes must be >= 0 (got {min_bytes})")
        self.min_bytes = min_bytes
        self.force = force

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        analysis = analysis_of(model)
        anchor = _anchor_gradient(analysis)
        if anchor is None:
            return outcome
        candidates, skipped = _candidates(analysis, anchor, self.min_bytes)
        outcome.skipped.extend(skipped)
        if not candidates:
            return outcome
        from ..planner.predict import predicted_peak

        current = model
        peak = None if self.force else predicted_peak(model)
        for producer_name, nbytes in candidates:
            # Each candidate is tried on a clone: kept only if the planner predicts a lower peak.
            trial = current.clone()
            _defer(trial, producer_name, anchor, analysis)
            record: dict[str, object] = {"producer": producer_name, "gradient_bytes": nbytes,
                                         "after": anchor, "pass": self.name}
            if peak is not None:
                new_peak = predicted_peak(trial)
                record.update(predicted_peak_before=peak, predicted_peak_after=new_peak)
                if new_peak >= peak:
                    outcome.skipped.append(Skipped(producer_name, "weight gradient",
                                                   f"deferring it would not lower the predicted peak "
                                                   f"({peak / 2**20:.1f} -> {new_peak / 2**20:.1f} MiB)"))
                    continue
                peak = new_peak
            current = trial
            outcome.records.append(PassRecord("deferred", self.name, producer_name, record))
        if current is not model:
            model.graph = current.graph     # the accepted trial's graph (the model object stays: in place)
        outcome.modified = bool(outcome.records)
        return outcome


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
        if _gate_input(analysis, list(node.input)) is None:
            skipped.append(Skipped(grad, "weight gradient", "no float input of static shape to gate on"))
            continue
        found.append((node.name, nbytes))
    found.sort(key=lambda c: -c[1])
    return found, skipped


def _gate_input(analysis: GraphAnalysis, inputs: list[str]) -> int | None:
    """Index of the input to gate: a float tensor with a static shape produced in the graph (dY)."""
    for k, name in enumerate(inputs):
        t = analysis.tensors.get(name) if name else None
        if t is not None and t.producer is not None and t.shape is not None and t.type.dtype.kind == "f":
            return k
    return None


def _defer(model: ir.Model, producer_name: str, anchor: str, analysis: GraphAnalysis) -> None:
    """Gate ``producer_name``'s dY input on ``anchor`` and move it (with its accumulators) right after the
    anchor's producer, in place. ``analysis``: of the graph before any deferral (tensor shapes and types)."""
    graph = model.graph
    node = graph.node(producer_name)
    k = _gate_input(analysis, [v.name if v is not None else "" for v in node.inputs])
    assert k is not None
    gated, anchor_value = node.inputs[k], _value(graph, anchor)
    info = analysis.tensors[gated.name]
    editor = IrGraphEditor(graph, prefix=gated.name.replace("/", "_").strip("_") + "__deferred")
    view = editor.gate(gated, after=anchor_value, shape=list(info.shape), elem=_elem(info),
                       after_elem=_elem(analysis.tensors[anchor]), name=f"{gated.name}{GATE_SUFFIX}")
    node.replace_input_with(k, view)
    # The producer and its accumulators move behind the anchor's producer (and its accumulator, if eager).
    accumulators = {u.node for o in node.outputs for u in o.uses() if u.node.op_type in ACCUMULATORS}
    moving = [node] + [n for n in graph if n in accumulators]
    chain = [n for n in graph if n.op_type == "And" and (n.name or "").startswith(CHAIN_PREFIX)]
    graph.remove(moving)
    if chain:
        graph.remove(chain, safe=True)
    after = anchor_value.producer()
    readers = {u.node for u in anchor_value.uses() if u.node.op_type in ACCUMULATORS}
    nodes = list(graph)
    pos = nodes.index(after)
    while pos + 1 < len(nodes) and nodes[pos + 1] in readers:
        pos += 1
    graph.insert_after(nodes[pos], editor.nodes + moving)
    if chain:   # the accumulator order changed: rebuild the order chain for it
        EagerAccumulationPass().call(model)


def _value(graph: ir.Graph, name: str) -> ir.Value:
    return next(v for n in graph for v in n.outputs if v.name == name)


def _elem(info) -> ir.DataType:
    return ir.DataType(helper.np_dtype_to_tensor_dtype(info.type.dtype))
