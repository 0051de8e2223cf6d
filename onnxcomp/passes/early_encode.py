"""Pass: encoders of a view that ORT's gradient builder made in backward run in the forward pass — exact.

ORT's gradient of a MatMul with an N-D input reads that input through a 2-D ``Reshape`` it places among the
backward nodes (``MatMul_Grad/Reshape_*``: ``A_reshape_2d``). The view reads only a forward tensor and a
constant shape, so it is a forward value, and a stash encoder put "right after the target's producer"
(passes/encode_stash.py) sits with it at the end of the node list, with no forward reader to wait on it: under
either ORT order it runs when backward gets there, and the full float tensor it was meant to replace stays
alive for the whole forward pass (GPT-tiny ``dpr-fp8``: the four attention output-projection inputs, 2 MiB
each, alive from their block to its backward).

This pass moves such a view and its encoder right after the viewed tensor's producer and makes the tensor's
other forward readers read it through a view gated on the encoder's anchor (``IrGraphEditor.gate``), so the
encoder runs as soon as the tensor exists under both orders. Same ops on the same values: only the order
changes.
"""
from __future__ import annotations

import onnx_ir as ir

from ..analysis import analysis_of
from ..custom_ops import contract
from .base import OnnxcompPass, PassOutcome
from .editor import IrGraphEditor, ir_taken_names, stable_toposort
from .records import PassRecord

_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def _constant(v: ir.Value | None) -> bool:
    if v is None:
        return True
    p = v.producer()
    return (p is None and (v.const_value is not None or v.is_initializer())) or \
        (p is not None and p.op_type == "Constant" and not p.inputs)


class EarlyEncodePass(OnnxcompPass):
    """Encoders of a late-placed forward view run where the viewed tensor is made (see the module docstring)."""

    name = "early_encode"
    full_check = False   # moves nodes and adds one gated view: wiring is what can go wrong

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        nodes = list(graph)
        encoders = [n for n in nodes if (op := contract.codec_op(n.domain, n.op_type)) is not None
                    and op.role == "encode"]
        if not encoders:
            return outcome
        analysis = analysis_of(model)
        backward = {nodes[i] for i in analysis.boundary.backward}
        position = {n: i for i, n in enumerate(nodes)}
        editor = IrGraphEditor(graph, ir_taken_names(graph), "onnxcomp_early")
        moves: list[tuple[ir.Node, ir.Node, ir.Node]] = []        # (producer, view, encoder)
        for enc in encoders:
            anchor = enc.outputs[contract.ENCODER_ANCHOR]
            view = enc.inputs[0].producer() if enc.inputs and enc.inputs[0] is not None else None
            if list(anchor.uses()) or view is None or view.op_type not in _VIEWS or view in backward \
                    or view.domain not in ("", "ai.onnx") or not all(_constant(v) for v in view.inputs[1:]):
                continue
            source = view.inputs[0]
            producer = source.producer()
            if producer is None or producer in backward or position[view] <= position[producer] + 1:
                continue
            readers = [u for u in source.uses() if u.node is not view and u.node not in backward]
            t = analysis.tensors.get(source.name)
            if not readers or t is None or t.shape is None:
                continue
            mark = len(editor.nodes)
            gated = editor.gate(source, anchor, shape=list(t.shape), elem=ir.DataType.from_numpy(t.type.dtype),
                                after_elem=ir.DataType.INT64,
                                name=editor.name(f"{source.name.replace('/', '_').strip('_')}__after_encode"))
            graph.insert_after(enc, editor.nodes[mark:])
            for u in readers:
                u.node.replace_input_with(u.idx, gated)
            moves.append((producer, view, enc))
            outcome.records.append(PassRecord("moved", self.name, enc.name, {
                "node": enc.name, "op": enc.op_type, "pass": self.name, "view": view.name, "after": producer.name,
                "note": "the encoder of a backward-placed view of a forward tensor runs where the tensor is made; "
                        "its forward readers wait on it (order only: exact)"}))
        if not moves:
            return outcome
        order = list(graph)
        for producer, view, enc in moves:
            order.remove(view)
            order.remove(enc)
            at = order.index(producer) + 1
            order[at:at] = [view, enc]
        order = stable_toposort(order, self.name)
        graph.remove([n for n in graph])
        graph.extend(order)
        outcome.modified = True
        return outcome
