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
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import INTERVAL_MASK
from .base import PassResult
from .encode_stash import EncodeStashPass, Encoding, decode_op_type

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
                        [[nbytes], [len(stash.shape)]],
                        f"Clip gradient mask: 1 bit/element of {x} in [{bounds['lo']:g}, {bounds['hi']:g}] (exact)")

    def run(self, model: onnx.ModelProto) -> PassResult:
        result = super().run(model)
        if result.modified:
            _clip_gradient_reads_mask(result.model)
        return result


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


def _clip_gradient_reads_mask(model: onnx.ModelProto) -> None:
    """Each intervalmask decoder's readers (the Clip gradient's Mul) read Cast(mask, float), and the
    comparison chain that made the float mask, now unread, is removed (else X would live until it ran)."""
    graph = model.graph
    decoder_op = decode_op_type("intervalmask")
    nodes = list(graph.node)
    shapes = {v.name: v.type.tensor_type.shape for v in graph.value_info}
    out: list[onnx.NodeProto] = []
    floats: dict[str, str] = {}
    for node in nodes:
        out.append(node)
        if node.op_type == decoder_op:
            mask = node.output[0]
            floats[mask] = f"{mask}__as_float"
            out.append(helper.make_node("Cast", [mask], [floats[mask]], to=TensorProto.FLOAT,
                                        name=f"{mask}__as_float__cast"))
            info = helper.make_tensor_value_info(floats[mask], TensorProto.FLOAT, None)
            if mask in shapes:
                info.type.tensor_type.shape.CopyFrom(shapes[mask])
            graph.value_info.append(info)
    for node in out:
        if node.op_type != "Cast" or node.input[0] not in floats:
            node.input[:] = [floats.get(i, i) for i in node.input]
    # Dead-chain removal: nodes of the gradient chain whose outputs nobody reads any more.
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for n in out for i in n.input if i} | outputs
        dead = [n for n in out if n.op_type in _CHAIN_OPS and n.domain in ("", "ai.onnx")
                and not any(o in read for o in n.output if o)]
        if not dead:
            break
        gone = {id(n) for n in dead}
        out = [n for n in out if id(n) not in gone]
    del graph.node[:]
    graph.node.extend(out)
    produced = {o for n in out for o in n.output} | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    keep = [v for v in graph.value_info if v.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(keep)
