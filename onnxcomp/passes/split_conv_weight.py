"""Pass: split a large convolution weight into output-channel blocks, so its gradient never exists whole.

ORT's ConvGrad writes the weight gradient of a conv into a fresh tensor of the weight's size, which then goes
into the gradient buffer (InPlaceAccumulatorV2). ResNet-18's layer4 convs (512×512×3×3) make a 9 MiB
transient that, once every activation is encoded, sets the training step's peak. As for fully connected
weights (``split_weight``, whose artifact machinery this reuses), the block has to be a parameter of its
own: ``W`` [O, I, kh, kw] becomes ``W.part0`` … ``W.part{p-1}``, blocks [o_j, I, kh, kw] of at most
``split_weight_bytes``, each with its own gradient buffer.

For ``Y = Conv(X, W[, b])`` with output-channel bounds r_0 = 0 < … < r_p = O:

    forward    Y    = Concat_j Conv(X, W_j[, b_j])                       (axis 1)
    backward   dY_j = dY[:, r_j:r_{j+1}]
               dX_j, dW_j[, db_j] = ConvGrad(dY_j, X, W_j)  → dW_j into its own accumulator at once
               dX   = Σ_j dX_j                                           (a running sum)

Each output channel's weight gradient is independent of the others (the same reduction over batch and
positions); dX is summed in p partial products, so it differs from ORT's by rounding: the records say
``"exact": false`` and only lossy budgets use it. The checkpoint and the eval model are rewritten as for
``split_weight`` (``runtime.checkpoint.write_split_artifacts``); ``merged_parameters`` gives the original
names back.
"""
from __future__ import annotations

import math

import onnx_ir as ir

from ..analysis.training_graph import GRAD_BUFFER_SUFFIX, GRAD_OUT_SUFFIX
from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, Skipped
from .editor import IrGraphEditor, ir_taken_names, unique_name
from .records import PassRecord
from .split_weight import (PART_INFIX, WeightSplit, _block_inputs, _graph_input, _prefix, _row_bounds, _slice,
                           _take_over, float_grad_buffers, record_splits, splits_made)

PATTERN = "conv weight"


def _forward_conv(weight: ir.Value) -> ir.Node | None:
    convs = [u.node for u in weight.uses() if u.node.op_type == "Conv" and u.node.domain == "" and u.idx == 1]
    return convs[0] if len(convs) == 1 else None


def split_forward_conv(graph: ir.Graph, split: WeightSplit, taken: set[str] | None = None) -> bool:
    """Replace the forward ``Conv(X, W[, b])`` reading ``split.parameter`` by per-block convs and a Concat
    over channels, the graph input ``W`` by its blocks (the eval model's whole rewrite; the training graph's
    forward half). False if there is none."""
    weight = _graph_input(graph, split.parameter)
    conv = _forward_conv(weight) if weight is not None else None
    if conv is None:
        return False
    editor = IrGraphEditor(graph, taken if taken is not None else ir_taken_names(graph), _prefix(split.parameter))
    parts = _block_inputs(graph, weight, split)
    x, bias = conv.inputs[0], (conv.inputs[2] if len(conv.inputs) > 2 else None)
    outs = []
    for j, part in enumerate(parts):
        inputs = [x, part]
        if bias is not None:
            inputs.append(_slice(editor, bias, split.bounds[j], split.bounds[j + 1], 0, f"bias{j}"))
        outs.append(editor.clone(conv, inputs, [(editor.name(f"y{j}"), ir.DataType.FLOAT, None)],
                                 name=editor.name(f"conv{j}")).outputs[0])
    y = conv.outputs[0]
    concat = editor.node("Concat", outs, [(y.name, ir.DataType.FLOAT, None)], axis=1,
                         name=unique_name(f"{editor.prefix}_concat", editor.taken))
    _take_over(y, concat.outputs[0])
    graph.insert_before(conv, editor.nodes)
    graph.remove(conv, safe=True)
    return True


class SplitConvWeightPass(OnnxcompPass):
    """split_weight_bytes: largest conv weight block kept in one piece (None: nothing is split). Lossy budgets
    only: dX is summed over the blocks (rounding)."""

    name = "split_conv_weight"

    def __init__(self, split_weight_bytes: int | None = None) -> None:
        if split_weight_bytes is not None and split_weight_bytes <= 0:
            raise OnnxcompError(f"split_weight_bytes must be > 0 (got {split_weight_bytes})")
        self.max_part_bytes = split_weight_bytes

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        if self.max_part_bytes is None:
            return outcome
        graph = model.graph
        for buffer, param, shape, nbytes in float_grad_buffers(graph, 4):
            parts = min(shape[0], math.ceil(nbytes / self.max_part_bytes))
            if parts < 2:
                continue
            site = _match(graph, param, buffer)
            if isinstance(site, str):
                outcome.skipped.append(Skipped(param, PATTERN, site))
                continue
            split = _rewrite(graph, param, shape, buffer, *site, _row_bounds(shape[0], parts))
            outcome.records.append(PassRecord("split_weight", self.name, split.parameter,
                                              split.to_dict() | {"exact": False}))
        if outcome.records:
            record_splits(model, splits_made(outcome))
            outcome.modified = True
        return outcome


def _match(graph: ir.Graph, param: str, buffer: ir.Value) -> tuple[ir.Node, ir.Node, ir.Node] | str:
    """(forward Conv, ConvGrad, accumulator) of ``param``, or why it cannot be split."""
    weight = _graph_input(graph, param)
    if weight is None:
        return "not a graph input"
    conv = _forward_conv(weight)
    grads = [u.node for u in weight.uses() if u.node.op_type == "ConvGrad" and u.idx == 2]
    readers = {u.node for u in weight.uses()}
    if conv is None or len(grads) != 1 or readers != {conv, grads[0]}:
        return "read by something other than one forward Conv and its ConvGrad"
    grad = grads[0]
    if grad.inputs[1] is not conv.inputs[0]:
        return "its ConvGrad reads another input than its Conv"
    if conv.attributes.get_int("group", 1) != 1:
        return "grouped conv (not handled)"
    accs = [u.node for u in buffer.uses() if u.node.op_type == "InPlaceAccumulatorV2" and u.idx == 0]
    dw = grad.outputs[1]
    if len(accs) != 1 or accs[0].inputs[1] is not dw or len(dw.uses()) != 1:
        return "its gradient is not read only by one InPlaceAccumulatorV2 on its buffer"
    if len(accs[0].outputs) != 1 or accs[0].outputs[0].name != param + GRAD_OUT_SUFFIX:
        return "its accumulator has no single graph output named after the parameter"
    return conv, grad, accs[0]


def _rewrite(graph: ir.Graph, param: str, shape: tuple[int, ...], buffer: ir.Value, conv: ir.Node,
             grad: ir.Node, acc: ir.Node, bounds: tuple[int, ...]) -> WeightSplit:
    taken = ir_taken_names(graph)
    parts = len(bounds) - 1
    split = WeightSplit(param, tuple(unique_name(f"{param}{PART_INFIX}{j}", taken) for j in range(parts)),
                        bounds, tuple(shape))
    for p in split.parts:
        taken.update({p + GRAD_BUFFER_SUFFIX, p + GRAD_OUT_SUFFIX})
    dy, x = grad.inputs[0], grad.inputs[1]
    dx = grad.outputs[0] if grad.outputs[0].name else None
    split_forward_conv(graph, split, taken)
    weights = [_graph_input(graph, p) for p in split.parts]
    buffers = _block_inputs(graph, buffer, split, GRAD_BUFFER_SUFFIX)
    flag = acc.outputs[0]
    ed = IrGraphEditor(graph, taken, _prefix(param))
    db = grad.outputs[2] if len(grad.outputs) > 2 and grad.outputs[2].name else None
    flags, running, db_parts = [], None, []
    for j, (weight, buf) in enumerate(zip(weights, buffers)):
        dy_j = _slice(ed, dy, bounds[j], bounds[j + 1], 1, f"dy{j}")
        last = j == parts - 1
        outs = [(ed.name(f"dx{j}"), ir.DataType.FLOAT, None) if dx is not None else None,
                (ed.name(f"grad{j}"), ir.DataType.FLOAT, [bounds[j + 1] - bounds[j], *shape[1:]])]
        if db is not None:    # the bias stays one parameter: its gradient is the blocks' concatenated
            outs.append((ed.name(f"db{j}"), ir.DataType.FLOAT, [bounds[j + 1] - bounds[j]]))
        g = ed.clone(grad, [dy_j, x, weight], outs, name=ed.name(f"conv_grad{j}"))
        if db is not None:
            db_parts.append(g.outputs[2])
        flags.append(ed.node("InPlaceAccumulatorV2", [buf, g.outputs[1], acc.inputs[2]],
                             [(split.parts[j] + GRAD_OUT_SUFFIX, flag.dtype, None)], domain=acc.domain,
                             name=ed.name(f"accumulate{j}")).outputs[0])
        flags[-1].shape = flag.shape
        if dx is not None:
            part = g.outputs[0]
            if running is not None:
                # the total is named as the old dX (which goes with the old ConvGrad below)
                name = dx.name if last else ed.name(f"dx_sum{j}")
                part = ed.node("Add", [running, part], [(name, ir.DataType.FLOAT, None)],
                               name=ed.name(f"dx_add{j}")).outputs[0]
            running = part
    if dx is not None:
        _take_over(dx, running)
    if db is not None:
        total = ed.node("Concat", db_parts, [(db.name, ir.DataType.FLOAT, [shape[0]])], axis=0,
                        name=ed.name("db_concat")).outputs[0]
        _take_over(db, total)
    graph.insert_before(grad, ed.nodes)
    k = graph.outputs.index(flag)
    graph.outputs[k:k + 1] = flags
    graph.remove([grad, acc], safe=True)
    return split
