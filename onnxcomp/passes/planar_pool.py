"""Pass: keep the MaxPools our passes emit out of ORT's NCHWc layout, whose reorder copies stay in its memory pattern.

Under ORT's default graph optimisation level (ALL), the CPU execution provider's NCHWc transformer
(onnxruntime 1.19, ``nchwc_transformer.cc``, ``NchwcTransformerImpl::TransformPool``) rewrites every MaxPool
that has *no indices output*, a float input of rank 4 and a static channel count divisible by MLAS's NCHWc
block (8 with AVX2, 16 with AVX-512) into ``ReorderInput → NchwcMaxPool → ReorderOutput``. The training
graph's own forward MaxPools keep their indices output (MaxPoolGrad reads them) and are left alone; the
single-output MaxPools that recomputation (passes/recompute.py), the chunked input chains and row split emit
are not. Each ReorderInput is a full copy of the pool's input (the large tensor), a buffer of its own in ORT's
memory pattern; with buffer reuse those copies are handed on to later same-sized tensors and held across the
step. VGG-16's ``auto --budget 112MiB`` plan: ORT's pattern block 171.6 MiB with the five reorder copies
(docs/notes/patternblock.md), 136.0 MiB with the pools lifted; growth under ORT's defaults 196.8 → 161.4 MiB
(docs/notes/nchwcpool.md).

ORT's transformer only takes 4-D inputs. So every such MaxPool becomes the 3-D one over ``[N, C, 1, H, W]``
(kernel, stride and dilation 1 and no padding on the new axis), between zero-copy views: ``Unsqueeze`` of its
input and a ``Reshape`` of its output back to ``[N, C, OH, OW]`` — the form ``ReuseSignaturePass`` gives
convolutions (its ``spatial`` lift). ORT's CPU MaxPool runs both through ``MlasPool`` (2-D and 3-D kernels
alike when there is no indices output, no dilation and ``storage_order`` 0), and a maximum is the same number
in any order: the same bits (tests/test_planar_pool.py checks ORT's outputs and that its optimised graph has no
Reorder node).
"""
from __future__ import annotations

import onnx_ir as ir

from ..analysis import analysis_of
from .base import OnnxcompPass, PassOutcome, Skipped
from .chunk_attention import value_shapes
from .editor import IrGraphEditor, ir_taken_names, unique_name
from .records import PassRecord
from .reuse_signature import _widen_conv_attributes, lifted_shape

PREFIX = "onnxcomp_planarpool"
PATTERN = "MaxPool without indices output (NCHWc-converted by ORT)"
_ONNX = ("", "ai.onnx")
# The smallest NCHWc block MLAS uses on any CPU that has the NCHWc kernels (AVX2: 8; AVX-512F: 16). A channel
# count that is no multiple of it is never converted, so its MaxPool is left as it is.
NCHWC_MIN_BLOCK = 8


def _site(node: ir.Node, shapes: dict[ir.Value, tuple[int, ...]]) -> str | None:
    """Why ``node`` (a MaxPool) is not one to lift, or None when it is."""
    if len(node.outputs) > 1 and node.outputs[1].name:
        return "has an indices output (ORT does not convert it)"
    x, y = node.inputs[0], node.outputs[0]
    if x is None or x.dtype not in (None, ir.DataType.FLOAT):
        return "not a float32 MaxPool"
    xs, ys = shapes.get(x), shapes.get(y)
    if xs is None or ys is None or len(xs) != 4 or len(ys) != 4:
        return "not a 2-D pool with static input and output shapes"
    if xs[1] % NCHWC_MIN_BLOCK:
        return f"{xs[1]} channels: no multiple of the NCHWc block (ORT does not convert it)"
    if y.is_graph_output():
        return "its output is a graph output"
    pad = node.attributes["auto_pad"].value if "auto_pad" in node.attributes else "NOTSET"
    if (pad.decode() if isinstance(pad, bytes) else pad) not in ("NOTSET", "VALID"):
        return f"auto_pad {pad}: the 3-D form would pad the new axis"
    return None


class PlanarPoolPass(OnnxcompPass):
    """Every MaxPool ORT would wrap in NCHWc reorder copies run as the 3-D MaxPool of a zero-copy view instead
    (see the module docstring). ``only_lowering``: only when that lowers ORT's memory-pattern block as
    ``planner.ort_pattern.predict_pattern_block`` predicts it from ORT's own optimised graph (two session
    set-ups, nothing runs). The wrap also moves the pool in ORT's run order (ORT's new nodes take the highest
    node indices, which both execution orders run last among the ready ones), and on a graph whose pools the
    passes placed early that later run can hold less: lossy plain_deep's row-split forward pools, P 9.40 →
    9.67 MiB lifted (docs/notes/nchwcpool.md)."""

    name = "planar_pool"

    def __init__(self, only_lowering: bool = True) -> None:
        super().__init__()
        self.only_lowering = only_lowering

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        if not any(n.op_type == "MaxPool" and n.domain in _ONNX for n in model.graph):
            return outcome
        if self.only_lowering:
            trial = ir.serde.deserialize_model(ir.serde.serialize_model(model))
            records, skipped = _lift_pools(trial, self.name)
            if not records:
                outcome.skipped += skipped
                return outcome
            before, after = _predicted_pattern(model), _predicted_pattern(trial)
            if before is not None and after is not None and after >= before:
                outcome.skipped += [Skipped(r.detail["node"], PATTERN,
                                            f"ORT's predicted pattern block would not drop ({before} → {after} B)")
                                    for r in records]
                return outcome
        outcome.records, outcome.skipped = _lift_pools(model, self.name)
        if self.only_lowering and before is not None and after is not None:
            for r in outcome.records:
                r.detail["pattern_block_bytes"] = [before, after]
        outcome.modified = bool(outcome.records)
        return outcome


def _predicted_pattern(model: ir.Model) -> int | None:
    """ORT's memory-pattern block for ``model`` (planner.ort_pattern), or None where ORT cannot set it up here
    (then the lift is not gated)."""
    from ..planner.ort_pattern import predict_pattern_block_of

    try:
        return predict_pattern_block_of(ir.serde.serialize_model(model)).size
    except Exception:   # noqa: BLE001  (any ORT set-up failure: the lift itself stays exact either way)
        return None


def _lift_pools(model: ir.Model, pass_name: str) -> tuple[list[PassRecord], list[Skipped]]:
    """Lift every MaxPool ``_site`` accepts (see the module docstring); its records and what it left."""
    records: list[PassRecord] = []
    skipped: list[Skipped] = []
    graph = model.graph
    nodes = list(graph)
    pools = [n for n in nodes if n.op_type == "MaxPool" and n.domain in _ONNX]
    shapes = value_shapes(analysis_of(model), nodes)
    shapes.update({v: tuple(int(d) for d in v.shape) for n in pools for v in (n.inputs[0], n.outputs[0])
                   if v is not None and v not in shapes and v.shape is not None and v.shape.is_static()})
    editor = IrGraphEditor(graph, ir_taken_names(graph), PREFIX)
    views: dict[ir.Value, ir.Value] = {}   # a pool input → its [N, C, 1, H, W] view (pools may share one)
    for pool in pools:
        why = _site(pool, shapes)
        if why is not None:
            if not why.startswith("has an indices output"):   # the training graph's own: not worth listing
                skipped.append(Skipped(pool.name, PATTERN, why))
            continue
        x, y = pool.inputs[0], pool.outputs[0]
        xs, ys = shapes[x], shapes[y]
        if x not in views:
            axes = editor.shared_const("onnxcomp_axes_2", [2])   # the name reuse_signature gives it
            mark = len(editor.nodes)
            views[x] = editor.op("Unsqueeze", [x, axes], "view", ir.DataType.FLOAT, lifted_shape(xs, 1, "spatial"),
                                 out=f"{x.name}__planar")
            # Right behind the input's producer (first, for a graph input), not by the pool: ORT's DEFAULT
            # order walks a node's inputs by their producers' list positions (as in reuse_signature._lift).
            made = editor.nodes[mark:]
            if x.producer() is not None:
                graph.insert_after(x.producer(), made)
            else:
                graph.insert_before(next(iter(graph)), made)
        pool.replace_input_with(0, views[x])
        _widen_conv_attributes(pool, 1)   # kernel_shape, strides, dilations, pads: the same keys as Conv's
        # The pool's output takes the 3-D shape under a new name; its readers read a Reshape view back,
        # under the old name (later passes and reports know the value by it).
        uses = list(y.uses())
        original = y.name
        y.type = ir.TensorType(ir.DataType.FLOAT)
        y.shape = ir.Shape(lifted_shape(ys, 1, "spatial"))
        if uses:
            y.name = unique_name(f"{original}__planar", editor.taken)
        # An output nobody reads (a chunked chain's last top pool) gets no view: it would be a dead node.
        if uses:
            dims = editor.shared_const(f"onnxcomp_shape_{'x'.join(map(str, ys))}", list(ys), [len(ys)])
            mark = len(editor.nodes)
            editor.taken.discard(original)
            back = editor.node("Reshape", [y, dims], [(original, ir.DataType.FLOAT, list(ys))],
                               name=unique_name(f"{original}__unplanar", editor.taken)).outputs[0]
            graph.insert_after(pool, editor.nodes[mark:])
            for use in uses:
                use.node.replace_input_with(use.idx, back)
        records.append(PassRecord("moved", pass_name, original, {
            "node": pool.name, "op": "MaxPool", "pass": pass_name, "pattern": PATTERN,
            "as": "3-D MaxPool of a [N, C, 1, H, W] view", "input": x.name, "input_shape": list(xs),
            "exact": True,
            "note": "ORT's NCHWc transformer converts only 4-D MaxPools: no ReorderInput copy of the input "
                    "in ORT's memory pattern"}))
    return records, skipped
