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

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from ..analysis import analysis_of
from ..analysis.cached import invalidate
from .base import OnnxcompPass, PassOutcome, RunLog, Skipped, run_passes
from .chunk_attention import value_shapes
from .editor import IrGraphEditor, ir_taken_names, unique_name
from .records import PassRecord
from .reuse_signature import _widen_conv_attributes, lifted_shape

if TYPE_CHECKING:
    from ..planner.ort_pattern import PatternBlock

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
    (see the module docstring). ``only_lowering``: only when that lowers ORT's memory-pattern block of the graph
    as this pass leaves it (``planner.ort_pattern``, from ORT's own optimised graph: two session set-ups,
    nothing runs). A transform does not gate here: passes that run after this one change the graph ORT plans
    (reuse views, declared shapes, order), so ``finish_with_pool_gate`` judges the two *finished* graphs
    instead (lossy plain_deep: judged here, the lift read 15.39 → 13.55 MB, but the finished graph grew
    +0.2 MiB under ORT's defaults; docs/notes/finalgate.md). The wrap also moves the pool in ORT's run order
    (ORT's new nodes take the highest node indices, which both execution orders run last among the ready
    ones), and on a graph whose pools the passes placed early that later run can hold less: lossy
    plain_deep's row-split forward pools, P 9.40 → 9.67 MiB lifted (docs/notes/nchwcpool.md)."""

    name = "planar_pool"

    def __init__(self, only_lowering: bool = True) -> None:
        super().__init__()
        self.only_lowering = only_lowering

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        if not any(n.op_type == "MaxPool" and n.domain in _ONNX for n in model.graph):
            return outcome
        gate: dict[str, Any] | None = None
        if self.only_lowering:
            trial = ir.serde.deserialize_model(ir.serde.serialize_model(model))
            records, skipped = _lift_pools(trial, self.name)
            invalidate(trial)     # _lift_pools read its analysis before lifting: the trial's state is stale
            if not records:
                outcome.skipped += skipped
                return outcome
            gate = _gate(model, trial)
            if not gate["lifted"]:
                outcome.skipped += [Skipped(r.detail["node"], PATTERN, _no_drop(gate)) for r in records]
                return outcome
        outcome.records, outcome.skipped = _lift_pools(model, self.name)
        if gate is not None:
            for r in outcome.records:
                r.detail["pattern_block_bytes"] = [gate["plain_bytes"], gate["lifted_bytes"]]
                r.detail["pattern_source"] = gate["source"]
        outcome.modified = bool(outcome.records)
        return outcome


def _predicted_pattern(model: ir.Model, base_dir: str | Path | None = None) -> PatternBlock:
    """ORT's memory-pattern block for ``model`` (``planner.ort_pattern``); where ORT cannot set the graph up
    here, the replay without ORT's optimisations, with the reason logged and kept in the block."""
    from ..analysis.cached import snapshot_of
    from ..planner.ort_pattern import pattern_block_or_replay

    return pattern_block_or_replay(snapshot_of(model), base_dir=base_dir, purpose="planar_pool's gate")


def _gate(plain: ir.Model, lifted: ir.Model, base_dir: str | Path | None = None) -> dict[str, Any]:
    """The gate's decision and figures, as the transform JSON reports them (``planar_pool_gate``): lift only
    where the predicted block drops. Both figures come from the same model: when ORT could not set up either
    graph, both are replayed (a replayed figure is not compared with one ORT optimised)."""
    from ..analysis.cached import snapshot_of
    from ..planner.ort_pattern import replay_pattern_block

    a, b = _predicted_pattern(plain, base_dir), _predicted_pattern(lifted, base_dir)
    reason = a.fallback_reason or b.fallback_reason
    if a.source != b.source:
        a, b = replay_pattern_block(snapshot_of(plain)), replay_pattern_block(snapshot_of(lifted))
    out: dict[str, Any] = {"plain_bytes": a.size, "lifted_bytes": b.size, "lifted": b.size < a.size,
                           "source": a.source}
    if reason is not None:
        out["fallback_reason"] = reason
    return out


def _no_drop(gate: dict[str, Any]) -> str:
    how = "ORT's predicted" if gate["source"] == "ort" else "the replayed (ORT could not set the graph up)"
    return f"{how} pattern block would not drop ({gate['plain_bytes']} → {gate['lifted_bytes']} B)"


def finish_with_pool_gate(model: ir.Model, finishing: Callable[[], list[OnnxcompPass]],
                          base_dir: str | Path | None = None) -> tuple[ir.Model, RunLog, dict[str, Any] | None]:
    """Run ``finishing()``'s passes on ``model``, with ``PlanarPoolPass`` in front of them where that lowers ORT's
    memory-pattern block of the *finished* graph, the graph that will be saved.

    The lift changes what the later passes see and do (the reuse pass's views and order, the declared shapes),
    and P is not additive over them: judged before them, lossy plain_deep's lift lowered the predicted block, but
    the finished graph's growth under ORT's defaults rose. So where any pool would be lifted, both pipelines
    run to the end (the passes run twice; the lifted one on a copy) and P is predicted on both finished graphs;
    the lower one is kept (ties keep the graph unlifted). Returns the model to continue with (``model`` or the
    lifted copy), the run's log and the gate's figures (None when no pool was liftable). ``base_dir``: where
    the graph's external data files are, for ORT's set-up."""
    if not any(n.op_type == "MaxPool" and n.domain in _ONNX for n in model.graph):   # nothing to lift: no copy
        return model, run_passes(model, finishing()), None
    trial = ir.serde.deserialize_model(ir.serde.serialize_model(model))
    if base_dir is not None:
        ir.external_data.set_base_dir(trial.graph, Path(base_dir))
    lift_log = run_passes(trial, [PlanarPoolPass(only_lowering=False)])
    if not lift_log.records:
        log = run_passes(model, finishing())
        log.skipped[:0] = lift_log.skipped
        return model, log, None
    lifted_log = run_passes(trial, finishing())
    plain_log = run_passes(model, finishing())
    gate = _gate(model, trial, base_dir)
    gate["pools"] = len(lift_log.records)
    if not gate["lifted"]:
        plain_log.skipped[:0] = [Skipped(r.detail["node"], PATTERN, _no_drop(gate)).to_dict()
                                 | {"pass": PlanarPoolPass.name} for r in lift_log.records]
        plain_log.skipped[:0] = lift_log.skipped
        return model, plain_log, gate
    for r in lift_log.records:
        r.detail["pattern_block_bytes"] = [gate["plain_bytes"], gate["lifted_bytes"]]
        r.detail["pattern_source"] = gate["source"]
    lifted_log.records[:0] = lift_log.records
    lifted_log.skipped[:0] = lift_log.skipped
    lifted_log.modified_by[:0] = lift_log.modified_by
    return trial, lifted_log, gate


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
