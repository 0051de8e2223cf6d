"""Pass: masked fills without ``Where``, so the step allocates nothing outside ORT's memory pattern for them.

ORT's CPU ``Where`` kernel (onnxruntime 1.19, ``where_op.cc``, ``UntypedSelect``) builds its output from two
temporaries of the output's size that it takes from the allocator itself, outside the memory pattern. Under
ORT's default session settings one such request per step is enough for the BFC arena to open a second region
as large as the pattern block and to keep both (about 2P; docs/notes/ortdefaults.md, cause 3, and
passes/arena_scratch.py). Transformer training graphs have one ``Where`` per attention mask in the forward
(``masked_fill``: scores → fill → Softmax), one per recompute clone of it, and one in backward (ORT's
gradient of ``Where``: ``Where(c, 0, dY)``); the chunked attention repeats each per chunk.

Every ``Where`` whose condition *broadcasts* (fewer elements than the output: a ``[T, T]`` causal mask, a
``[B, 1, 1, T]`` padding mask) and whose other branch is a one-element constant ``F`` becomes elementwise
arithmetic with a mask of the condition's shape — an initializer when the condition is a constant (computed
here, shared by every site with the same values), else a few ops on the small condition:

- ``F = 0`` (gradient of a fill): ``X · keep`` (keep = 1 where X is selected, 0 where filled). Equal values;
  only the *sign* of a filled zero may differ (``X · 0`` is ``-0`` for negative X, ``Where`` gives ``+0``).
  Any reader: a zero's sign changes no sum, product or update that is not itself zero (ORT's gradient of a
  Softmax already gives ``±0`` there).
- ``F = ±inf`` (the usual ``masked_fill(-inf)``): ``X + add`` (add = ``F`` where filled, 0 elsewhere):
  ``x + 0 = x`` and ``x + F = F`` for finite x. Only where every reader is a Softmax / LogSoftmax: the one
  difference, ``-0 + 0 = +0``, does not change their outputs (``exp(±0 - m)`` is the same number). Bit for
  bit the same probabilities (tests/test_masked_fill.py checks ORT's outputs).
- finite ``F ≠ 0`` (``masked_fill(-1e9)``): ``X · keep + fill`` (fill = ``F`` where filled, 0 elsewhere):
  ``x · 1 + 0 = x``, ``x · 0 + F = F``; same Softmax-only condition.

Non-finite data (an ``inf`` or NaN score) would give NaN where ``Where`` gives ``F``: a step with such scores
is lost either way. Conditions of the output's own size are left alone (the mask would be as large as the
data; the chunked attention's Dropout applies its full-size mask with ``Mul(Cast(mask))`` itself).
"""
from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from ..analysis import analysis_of
from .base import OnnxcompPass, PassOutcome, Skipped
from .chunk_attention import _const_value, value_shapes
from .editor import IrGraphEditor, ir_taken_names
from .records import PassRecord

PREFIX = "onnxcomp_maskfill"
PATTERN = "Where with a constant fill (masked fill)"
_ONNX = ("", "ai.onnx")
_SOFTMAXES = frozenset({"Softmax", "LogSoftmax"})


def _fill_site(node: ir.Node, shapes: dict[ir.Value, tuple[int, ...]]) -> tuple[int, float] | str:
    """(index of the data input, fill value) of a rewritable ``Where``, or why it is not one."""
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "not a three-input Where"
    cond, out = node.inputs[0], node.outputs[0]
    if out.dtype not in (None, ir.DataType.FLOAT) or cond.dtype not in (None, ir.DataType.BOOL):
        return "not a float32 Where"
    fills = [(k, _const_value(node.inputs[k])) for k in (1, 2)]
    fills = [(k, v) for k, v in fills if isinstance(v, float)]
    if len(fills) != 1:
        return "neither branch (or both) is a one-element float constant"
    fill_at, fill = fills[0]
    data_at = 3 - fill_at
    if math.isnan(fill):
        return "fill is NaN"
    c_shape, o_shape = shapes.get(cond), shapes.get(out)
    if c_shape is None or o_shape is None or shapes.get(node.inputs[data_at]) != o_shape:
        return "condition, data or output shape unknown (or the data broadcasts)"
    if int(np.prod(c_shape)) >= int(np.prod(o_shape)):
        return "the condition is as large as the output: its mask would be too"
    readers = list(out.uses())
    softmax_only = readers and not out.is_graph_output() and \
        all(u.node.op_type in _SOFTMAXES and u.node.domain in _ONNX for u in readers)
    if fill != 0.0 and not softmax_only:
        return f"fill {fill} read by other ops than Softmax (a -0 kept by Where would become +0)"
    return data_at, fill


class MaskedFillPass(OnnxcompPass):
    """Every ``Where(c, X, F)`` / ``Where(c, F, X)`` with a broadcasting condition and a constant fill as
    arithmetic ORT plans inside its memory pattern (see the module docstring)."""

    name = "masked_fill"
    full_check = False

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        nodes = list(graph)
        wheres = [n for n in nodes if n.op_type == "Where" and n.domain in _ONNX]
        if not wheres:
            return outcome
        shapes = value_shapes(analysis_of(model), nodes)
        # (initializers and graph inputs: their declared shapes)
        shapes.update({v: tuple(int(d) for d in v.shape) for n in wheres for v in n.inputs
                       if v is not None and v not in shapes and v.shape is not None and v.shape.is_static()})
        editor = IrGraphEditor(graph, ir_taken_names(graph), PREFIX)
        masks: dict[tuple, ir.Value] = {}     # (kind, condition or its bytes) → the mask value, made once
        for where in wheres:
            found = _fill_site(where, shapes)
            if isinstance(found, str):
                outcome.skipped.append(Skipped(where.name, PATTERN, found))
                continue
            data_at, fill = found
            cond, data, out = where.inputs[0], where.inputs[data_at], where.outputs[0]
            filled_when = data_at == 2          # Where(c, F, X): filled where c is true
            o_shape = list(shapes[out])
            mark = len(editor.nodes)
            if fill == 0.0:
                keep = _mask(editor, masks, cond, shapes[cond], filled_when, "keep", 0.0, 1.0)
                result = editor.op("Mul", [data, keep], "", ir.DataType.FLOAT, o_shape,
                                   out=editor.name(f"{_short(out.name)}_kept"))
                how = "X · keep"
            elif math.isinf(fill):
                add = _mask(editor, masks, cond, shapes[cond], filled_when, "add", fill, 0.0)
                result = editor.op("Add", [data, add], "", ir.DataType.FLOAT, o_shape,
                                   out=editor.name(f"{_short(out.name)}_filled"))
                how = f"X + ({fill} where filled, 0 elsewhere)"
            else:
                keep = _mask(editor, masks, cond, shapes[cond], filled_when, "keep", 0.0, 1.0)
                add = _mask(editor, masks, cond, shapes[cond], filled_when, "add", fill, 0.0)
                kept = editor.op("Mul", [data, keep], "", ir.DataType.FLOAT, o_shape,
                                 out=editor.name(f"{_short(out.name)}_kept"))
                result = editor.op("Add", [kept, add], "", ir.DataType.FLOAT, o_shape,
                                   out=editor.name(f"{_short(out.name)}_filled"))
                how = f"X · keep + ({fill} where filled, 0 elsewhere)"
            # The new nodes (and any run-time mask made for this condition) take the Where's place.
            graph.insert_before(where, editor.nodes[mark:])
            name = out.name
            out.replace_all_uses_with(result, replace_graph_outputs=True)
            graph.remove(where, safe=True)
            result.name = name                   # later passes and reports know the value by its name
            shapes[result] = tuple(o_shape)
            outcome.records.append(PassRecord("moved", self.name, where.name or name, {
                "node": where.name, "op": "Where", "pass": self.name, "pattern": PATTERN,
                "fill": fill, "as": how, "mask_shape": list(shapes[cond]),
                "mask": "initializer" if cond.const_value is not None else "computed from the condition",
                "exact": True,
                "note": ("same values; a filled zero's sign may differ" if fill == 0.0 else
                         "same Softmax output bit for bit") +
                        ": Where's kernel takes two output-sized temporaries outside ORT's memory pattern"}))
            outcome.modified = True
        return outcome


def _mask(editor: IrGraphEditor, masks: dict[tuple, ir.Value], cond: ir.Value, shape: tuple[int, ...],
          filled_when: bool, kind: str, where_filled: float, elsewhere: float) -> ir.Value:
    """A float32 tensor of the condition's shape: ``where_filled`` where the Where fills, ``elsewhere``
    elsewhere. An initializer when the condition is a constant (shared by equal masks), else made at run time
    from the condition (once per condition and kind)."""
    if cond.const_value is not None:
        filled = cond.const_value.numpy().astype(bool) == filled_when
        array = np.where(filled, np.float32(where_filled), np.float32(elsewhere)).astype(np.float32)
        key = (kind, where_filled, array.shape, array.tobytes())
        if key not in masks:
            masks[key] = editor.initializer(f"{PREFIX}_{kind}", array)
        return masks[key]
    key = (kind, where_filled, cond)
    if key in masks:
        return masks[key]
    dims = list(shape)
    filled = cond if filled_when else editor.op("Not", [cond], "not", ir.DataType.BOOL, dims)
    ones = editor.op("Cast", [filled], f"{kind}_filled_f32", ir.DataType.FLOAT, dims, to=ir.DataType.FLOAT)
    if kind == "keep":    # 1 − filled: 1 where X is selected, +0 where filled
        one = editor.shared_tensor(f"{PREFIX}_one_f32", np.array(1.0, dtype=np.float32))
        value = editor.op("Sub", [one, ones], kind, ir.DataType.FLOAT, dims)
    elif math.isinf(where_filled):   # F · filled would be F · 0 = NaN: Log(1 − filled) is 0 or −inf, exactly
        one = editor.shared_tensor(f"{PREFIX}_one_f32", np.array(1.0, dtype=np.float32))
        kept = editor.op("Sub", [one, ones], f"{kind}_kept_f32", ir.DataType.FLOAT, dims)
        value = editor.op("Log", [kept], kind, ir.DataType.FLOAT, dims)
        if where_filled > 0:
            value = editor.op("Neg", [value], kind, ir.DataType.FLOAT, dims)
    else:                 # F · 1 = F, F · 0 = ±0 (x · 1 + ±0 = x for every x ≠ 0; x = ±0 gives a zero)
        f = editor.shared_tensor(f"{PREFIX}_fill_{where_filled!r}".replace("-", "m").replace(".", "p"),
                                 np.array(where_filled, dtype=np.float32))
        value = editor.op("Mul", [ones, f], kind, ir.DataType.FLOAT, dims)
    masks[key] = value
    return value


def _short(name: str) -> str:
    return name.replace("/", "_").strip("_")[-60:]
