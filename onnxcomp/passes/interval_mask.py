"""Pass: the Clip gradient's mask held as one bit per element of the Clip input (codec ``intervalmask``).

ORT 1.19 differentiates ``Y = Clip(X, min, max)`` (ReLU6, and HardSigmoid / HardSwish written as
``relu6(x + 3) / 6``: ORT has no HardSigmoid/HardSwish gradient) as

    m = And(GreaterOrEqual(X, min), LessOrEqual(X, max));  dX = Mul(dY, Cast(m, float))

The comparisons read no gradient, so by data flow they are forward nodes, but ORT schedules them where the
gradient builder put them, in backward: X (float) lives until then, and the float mask they make is what
the analysis sees stashed (``Clip-mask→Mul``). This pass encodes X right after its producer with the
interval predicate ``min <= X <= max`` (the bits the comparisons would give, NaN included), decodes the bits
to booleans just before the Mul, which reads ``Cast(mask, float)``, and removes the comparisons: X is freed
after the Clip. The booleans are the And's, so dX is bit-identical.
"""
from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnx import numpy_helper

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import INTERVAL_MASK
from ..custom_ops import contract
from .editor import IrGraphEditor
from .encode_stash import EncodeStashPass, Encoding

_COMPARISONS = {"GreaterOrEqual": "lo", "LessOrEqual": "hi"}
# The gradient chain this pass makes dead (the Cast of the mask, the And, the comparisons).
_CHAIN_OPS = {"Cast", "And", "GreaterOrEqual", "LessOrEqual"}


class IntervalMaskPass(EncodeStashPass):
    name = "interval_mask"
    encoding = INTERVAL_MASK
    codec = "intervalmask"

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        graph = analysis.model.graph
        cast = graph.node[stash.producer]
        made = {o: graph.node[t.producer] for o, t in analysis.tensors.items() if t.producer is not None}
        pred = made.get(cast.input[0])
        if pred is None:
            return "the mask's predicate is not made in the graph"
        comparisons = [made.get(i) for i in pred.input] if pred.op_type == "And" else [pred]
        if any(c is None or c.op_type not in _COMPARISONS for c in comparisons):
            return "the mask is not GreaterOrEqual/LessOrEqual of the Clip input (and their And)"
        xs = {c.input[0] for c in comparisons}
        if len(xs) != 1:
            return "the comparisons read different tensors"
        (x,) = xs
        bounds = {"lo": -math.inf, "hi": math.inf}
        for c in comparisons:
            value = _scalar_constant(analysis, c.input[1])
            if value is None:
                return f"{c.op_type}'s bound {c.input[1]!r} is not a constant scalar"
            bounds[_COMPARISONS[c.op_type]] = value
        t = analysis.tensors.get(x)
        if t is None or t.producer is None:
            return "the Clip input is a graph input (no producer to encode after)"
        if t.type.dtype != np.float32:
            return f"Clip input dtype {t.type.dtype}: the intervalmask op takes float32"
        if stash.shape is None or t.shape != stash.shape:
            return f"Clip input shape {t.shape} differs from the mask's {stash.shape} (broadcast bound?)"
        n = numel(stash.shape)
        nbytes = (n + 7) // 8
        return Encoding(stash.name, x, x, self.codec, bounds, [nbytes, 8 * len(stash.shape)],
                        [[nbytes], None],  # shape payload symbolic: see signbits._payload_shapes
                        f"Clip gradient mask: 1 bit/element of {x} in [{bounds['lo']:g}, {bounds['hi']:g}] (exact)")

    def finish(self, model: ir.Model) -> None:
        _clip_gradient_reads_mask(model.graph)


def _scalar_constant(analysis: GraphAnalysis, name: str) -> float | None:
    """The float value of a one-element initializer or Constant node output, else None."""
    graph = analysis.model.graph
    arr = None
    for init in graph.initializer:
        if init.name == name:
            arr = numpy_helper.to_array(init)
    t = analysis.tensors.get(name)
    if arr is None and t is not None and t.producer is not None:
        node = graph.node[t.producer]
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    arr = numpy_helper.to_array(a.t)
                elif a.name == "value_float":
                    arr = np.float32(a.f)
    if arr is None or np.size(arr) != 1 or np.asarray(arr).dtype != np.float32:
        return None
    value = float(np.asarray(arr).reshape(-1)[0])
    return None if math.isnan(value) else value


def _clip_gradient_reads_mask(graph: ir.Graph) -> None:
    """Each intervalmask decoder's readers (the Clip gradient's Mul) read Cast(mask, float), and the
    comparison chain that made the float mask, now unread, is removed (else X would live until it ran)."""
    editor = IrGraphEditor(graph, taken=set(), prefix="")
    decoders = [n for n in graph if n.op_type == contract.decode_op("intervalmask")]
    masks = {d.outputs[contract.DECODER_OUTPUT] for d in decoders}
    for decoder in decoders:
        mask = decoder.outputs[contract.DECODER_OUTPUT]
        shape = list(mask.shape) if mask.shape is not None else None
        cast = editor.node("Cast", [mask], [(f"{mask.name}__as_float", ir.DataType.FLOAT, shape)],
                           name=f"{mask.name}__as_float__cast", to=ir.DataType.FLOAT)
        for u in list(mask.uses()):
            if not (u.node.op_type == "Cast" and u.node.inputs[0] in masks):
                u.node.replace_input_with(u.idx, cast.outputs[0])
        graph.insert_after(decoder, cast)
    # Dead-chain removal: nodes of the gradient chain whose outputs nobody reads any more (one scan of the
    # graph, then the producers of what the removed nodes read).
    def dead(node: ir.Node) -> bool:
        return node.op_type in _CHAIN_OPS and node.domain in ("", "ai.onnx") and node.graph is graph \
            and not any(v.uses() or v.is_graph_output() for v in node.outputs if v.name)

    todo = [n for n in graph if dead(n)]
    while todo:
        upstream = dict.fromkeys(v.producer() for n in todo for v in n.inputs if v is not None and v.producer())
        graph.remove(todo, safe=True)     # (detaches the removed nodes' inputs)
        todo = [n for n in upstream if dead(n)]
