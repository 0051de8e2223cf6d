"""Pass: a 1×1 convolution followed by a non-overlapping average pool, ``AveragePool(Conv₁ₓ₁(X))``, becomes
``Conv₁ₓ₁(AveragePool(X))`` in forward and in backward (DenseNet transitions: BN → ReLU → 1×1 conv → 2×2
average pool).

Why: the conv's weight gradient reads its input X. Before, ConvGrad reads X at full resolution (a stash, or a
decoded copy of one, beside the output gradient); after, it reads the pooled P, a kernel-area fraction of it
(a quarter for 2×2), and the conv runs on a quarter of the pixels. On densenet_s the first transition's
backward (the decoded 3.5 MiB ReLU output ConvGrad reads for dW) set the lossy plan's floor
(docs/notes/suite4x.md).

Why it is right: both ops are linear, and they act on different axes — a 1×1 conv mixes channels per pixel
(``y = W·x + b``), an average pool with no padding averages pixels per channel. For every output pixel p with
window S(p) of k pixels: ``avg_{s∈S(p)} (W·x_s + b) = W·avg_{s∈S(p)} x_s + b``. The windows are the same in
both orders (the pool's geometry is unchanged; only the channel count of its input differs), so the outputs
agree up to float rounding (sums in another order). Backward is the chain rule of the new forward:

    dP, dW, dB = ConvGrad(dY, P, W)         (was: ConvGrad(AveragePoolGrad(dY), X, W))
    dX         = AveragePoolGrad(dP)

AveragePoolGrad keeps the pool's attributes; it maps the pooled grid back to X's grid exactly as it mapped it
to the conv output's (same spatial sizes), so what ORT infers for its output shape is unchanged.

Not exact (rounding): lossy policies only. Conditions (checked, else skipped with a reason): a 1×1 kernel,
unit strides, no padding, no auto_pad; the pool without padding, ceil_mode 0, no auto_pad, no dilation; the
conv output read only by the pool; one ConvGrad reading (X, W) whose dY is one AveragePoolGrad with the pool's
attributes, read by it alone.
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped
from .chunk_input_block import _static, _take_over
from .editor import IrGraphEditor, ir_taken_names
from .records import PassRecord

PATTERN = "AveragePool(Conv 1x1(X)) -> Conv 1x1(AveragePool(X))"
_POOL_ATTRS = ("kernel_shape", "strides", "pads", "count_include_pad", "ceil_mode", "auto_pad", "dilations")


def _ints(node: ir.Node, name: str) -> tuple[int, ...] | None:
    attr = node.attributes.get(name)
    return tuple(attr.as_ints()) if attr is not None else None


def _pool_attrs(node: ir.Node) -> dict[str, object]:
    return {k: (tuple(a.value) if isinstance(a.value, (list, tuple)) else a.value)
            for k, a in node.attributes.items() if k in _POOL_ATTRS}


def _match(pool: ir.Node) -> tuple[ir.Node, ir.Node, ir.Node] | str:
    """(conv, its ConvGrad, the pool's AveragePoolGrad) or why ``pool`` cannot be commuted with its input."""
    if pool.attributes.get_string("auto_pad", "NOTSET") != "NOTSET" or pool.attributes.get_int("ceil_mode", 0):
        return "pool with auto_pad or ceil_mode"
    if any(_ints(pool, "pads") or ()) or any(d != 1 for d in (_ints(pool, "dilations") or ())):
        return "padded or dilated pool"
    conv = pool.inputs[0].producer()
    if conv is None or conv.op_type != "Conv" or conv.domain != "":
        return "its input is not a Conv's output"
    x, w = conv.inputs[0], conv.inputs[1]
    wshape, xshape = _static(w), _static(x)
    if wshape is None or xshape is None or len(xshape) != 4 or tuple(wshape[2:]) != (1, 1):
        return "not a 1x1 2-D conv with static shapes"
    if conv.attributes.get_string("auto_pad", "NOTSET") != "NOTSET" or any(_ints(conv, "pads") or ()) \
            or any(s != 1 for s in (_ints(conv, "strides") or ())):
        return "the conv is padded or strided"
    c = conv.outputs[0]
    if len(c.uses()) != 1 or c.is_graph_output():
        return "the conv's output is read by more than the pool"
    grads = [u.node for u in w.uses() if u.node.op_type == "ConvGrad" and u.idx == 2 and u.node.inputs[1] is x]
    if len(grads) != 1:
        return "not one ConvGrad reading the conv's input and weight"
    grad = grads[0]
    pool_grad = grad.inputs[0].producer()
    if pool_grad is None or pool_grad.op_type != "AveragePoolGrad" or len(grad.inputs[0].uses()) != 1:
        return "the ConvGrad's output gradient is not one AveragePoolGrad's, read by it alone"
    if _pool_attrs(pool_grad) != _pool_attrs(pool):
        return "the AveragePoolGrad's attributes differ from the pool's"
    return conv, grad, pool_grad


class CommutePoolConvPass(OnnxcompPass):
    """Every ``AveragePool(Conv 1×1(X))`` that matches becomes ``Conv 1×1(AveragePool(X))``, backward included.
    Lossy (float rounding of the reordered sums)."""

    name = "commute_pool_conv"

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        taken = ir_taken_names(graph)
        for pool in [n for n in graph if n.op_type == "AveragePool" and n.domain == ""]:
            site = _match(pool)
            if isinstance(site, str):
                outcome.skipped.append(Skipped(pool.name, PATTERN, site))
                continue
            conv, grad, pool_grad = site
            x, y = conv.inputs[0], pool.outputs[0]
            label = conv.name or conv.outputs[0].name          # unnamed nodes: the conv's output names it
            ed = IrGraphEditor(graph, taken, prefix=f"{label}_commuted", sep="/")
            n, cin = _static(x)[:2]
            spatial = list(_static(y)[2:])
            f32 = ir.DataType.FLOAT
            # Forward, where the conv was: P = pool(X), Y = conv(P).
            p = ed.clone(pool, [x], [(ed.name("pooled"), f32, [n, cin, *spatial])], name=ed.name("AveragePool"))
            y_new = ed.clone(conv, [p.outputs[0], *conv.inputs[1:]], [(ed.name("y"), f32, None)],
                             name=ed.name("Conv"))
            _take_over(y, y_new.outputs[0])
            graph.insert_before(conv, ed.nodes)
            # Backward, where the old AveragePoolGrad was: dP, dW, dB = ConvGrad(dY, P, W); dX = poolgrad(dP).
            bwd = IrGraphEditor(graph, taken, prefix=f"{label}_commuted", sep="/")
            dx = grad.outputs[0] if grad.outputs[0].name else None
            outs = [(bwd.name("pooled_grad"), f32, [n, cin, *spatial]) if dx is not None else None]
            outs += [(v.name + "_commuted", f32, None) if v.name else None for v in grad.outputs[1:]]
            g = bwd.clone(grad, [pool_grad.inputs[0], p.outputs[0], *grad.inputs[2:]], outs,
                          name=bwd.name("ConvGrad"))
            for old, new in zip(grad.outputs[1:], g.outputs[1:]):
                if old.name:
                    _take_over(old, new)
            if dx is not None:
                dx_new = bwd.clone(pool_grad, [g.outputs[0]], [(bwd.name("input_grad"), f32, list(_static(x)))],
                                   name=bwd.name("AveragePoolGrad")).outputs[0]
                _take_over(dx, dx_new)
                # ORT's AveragePoolGrad sizes its output from the graph's shape of it: X's, whatever dX had.
                dx_new.shape = ir.Shape(list(_static(x)))
            graph.insert_before(pool_grad, bwd.nodes)
            graph.remove([conv, pool, grad, pool_grad], safe=True)
            outcome.records.append(PassRecord(
                "commuted", self.name, label,
                {"pool": pool.name or y.name, "conv": label, "input": x.name,
                 "held_for_weight_gradient": p.outputs[0].name, "exact": False}))
        outcome.modified = bool(outcome.records)
        return outcome
