"""Pass: BatchNorm's saved statistics held outside ORT's memory-pattern block, where they cannot fragment it.

Under ORT's default session settings every tensor with a static shape gets a fixed offset in one block P
(``planner/ort_pattern.py``), placed when it is produced, at the best-fitting gap among the blocks whose
lifetimes overlap its own. A training BatchNorm's ``saved_mean`` / ``saved_inv_std`` ([C] floats, 256 B each
after ORT's rounding) are produced in the forward pass and read only by its ``BatchNormalizationGrad``, so they
live almost the whole step; the first BatchNorm's are placed on top of the two large maps live at that moment
(its input and output) and stay there. In ResNet-18's `auto --exact` plan (batch 32, 64×64) the stem's pair sits
at offset 16.0 MiB from node 5 to node 579 of 587: at the end of the backward the three 8 MiB stem-gradient
tensors cannot be laid out below it, and the third goes on top: P = 32.0 MiB where the live bytes there are 24.0
(docs/notes/r18exact2.md).

The pass gives ORT a copy it cannot size before the run: right after the BatchNorm,

    end   = C + zero_after(saved_inv_std)              (an int64 [1] that is C, computed at run time)
    mean' = Slice(saved_mean, [0], end);  inv' = Slice(saved_inv_std, [0], end)

and the BatchNormalizationGrad reads ``mean'`` / ``inv'``. ORT's shape inference cannot fold ``end`` (it is
derived from data), so the copies have no static shape: ORT allocates them on their own at run time, 256 B each
from its arena, outside P, and the pattern's own statistics buffers are freed at once. The BatchNorm's forward
readers read its output through ``Reshape(Y, shape + zero_after(mean', inv'))`` (a zero-copy view, the anchor the
encoders use), so the copies run in the forward pass under ORT's DEFAULT order too (a node that only the backward
reads is run when the backward pulls it, and the originals would live as long as before).

Values: a Slice copies bits, the zero is ``Less(t, t)`` (false for every t, NaN included), the view changes no
value: losses and parameters are bit-identical.

Not every graph gains: P's layout is best fit over the whole step and moving small blocks can leave it as it
was or, in principle, make it worse. With ``only_lowering`` (the default) the pass keeps the rewrite only where
the replayed pattern block (``ort_pattern.replay_pattern_block``, ORT-free: ~0.3 s on a 600-node graph) drops;
otherwise it leaves the graph alone and says why. `transform` runs it last, after the finishing passes (declared
shapes included) and outside the budget planner's predictions (transform.py says why), so the replay judges the
graph that will be saved.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped
from .editor import IrGraphEditor, ir_taken_names, static_shape, unique_name
from ..metadata import merge_size_hints
from .records import PassRecord

if TYPE_CHECKING:
    from ..planner.ort_pattern import PatternBlock

PATTERN = "BatchNorm saved statistics (held across the step in ORT's pattern block)"
PREFIX = "onnxcomp_detach"
_MS = "com.microsoft"
_START = ("onnxcomp_detach_start", [0])


def _label(bn: ir.Node) -> str:
    return bn.name or bn.outputs[0].name


def _shape_of(analysis: Any, v: ir.Value | None) -> list[int] | None:
    """``v``'s static shape, from the graph or else from the analysis (a graph may declare no intermediate
    shapes)."""
    declared = static_shape(v)
    shape = list(declared) if declared is not None else None
    if shape is None and v is not None and v.name in analysis.tensors:
        t = analysis.tensors[v.name].type
        shape = [int(d) for d in t.shape] if t.shape is not None and all(isinstance(d, int) for d in t.shape) \
            else None
    return shape


def _is_float(analysis: Any, v: ir.Value) -> bool:
    if v.dtype is not None:
        return v.dtype == ir.DataType.FLOAT
    t = analysis.tensors.get(v.name)
    return t is not None and np.dtype(t.type.dtype) == np.float32


def _site(bn: ir.Node, backward: set[ir.Node], analysis: Any) -> str | None:
    """Why ``bn`` is left alone (None: it is rewritten)."""
    if len(bn.outputs) < 5 or bn.outputs[3] is None or bn.outputs[4] is None:
        return "no saved statistics outputs"
    mean, inv, y = bn.outputs[3], bn.outputs[4], bn.outputs[0]
    for v in (mean, inv):
        if not v.name or v.is_graph_output():
            return f"{v.name or 'a statistic'} is absent or a graph output"
        if not _is_float(analysis, v) or _shape_of(analysis, v) is None or len(_shape_of(analysis, v)) != 1:
            return f"{v.name}: not a static float vector"
        readers = [u.node for u in v.uses()]
        if not readers:
            return f"{v.name}: read by nothing"
        if any(r.op_type != "BatchNormalizationGrad" or r not in backward for r in readers):
            return f"{v.name}: read by something other than a backward BatchNormalizationGrad"
    if _shape_of(analysis, y) is None or not _is_float(analysis, y):
        return "its output has no static shape to anchor on"
    if not any(u.node not in backward for u in y.uses()):
        return "its output has no forward reader to anchor the copies on"
    return None


def _detach(graph: ir.Graph, bn: ir.Node, backward: set[ir.Node], ed: IrGraphEditor, analysis: Any
            ) -> dict[str, Any]:
    mean, inv, y = bn.outputs[3], bn.outputs[4], bn.outputs[0]
    c = _shape_of(analysis, mean)[0]
    since = len(ed.nodes)
    base = unique_name(f"{PREFIX}_{(bn.name or y.name).replace('/', '_').strip('_')}", ed.taken)
    start = ed.shared_const(*_START)
    length = ed.shared_const(f"{PREFIX}_len_{c}", [c])
    zero = ed.zero_after(inv, ir.DataType.FLOAT, base=f"{base}_len")
    end = ed.op("Add", [length, zero], "", ir.DataType.INT64, [1], out=f"{base}_end")
    copies = [ed.op("Slice", [v, start, end], "", ir.DataType.FLOAT, None, out=f"{v.name}__detached")
              for v in (mean, inv)]
    fwd = [u for u in y.uses() if u.node not in backward]
    shape = _shape_of(analysis, y)
    held = ed.zero_after_all(copies, ir.DataType.FLOAT, base=f"{base}_held")
    view = ed.gate(y, copies[-1], shape=shape, elem=ir.DataType.FLOAT, zero=held,
                   name=unique_name(f"{y.name}__stats_held", ed.taken))
    for u in fwd:
        u.node.replace_input_with(u.idx, view)
    for v, copy in zip((mean, inv), copies):
        for u in list(v.uses()):
            if u.node in backward:
                u.node.replace_input_with(u.idx, copy)
    graph.insert_after(bn, ed.nodes[since:])
    return {"batchnorm": _label(bn), "statistics": [mean.name, inv.name], "copies": [v.name for v in copies],
            "bytes": 2 * c * 4, "exact": True}


def detach_statistics(model: ir.Model, pass_name: str, only: set[str] | None = None
                      ) -> tuple[list[PassRecord], list[Skipped]]:
    """Rewrite every BatchNorm ``_site`` accepts (the module docstring), or only those whose saved mean is named
    in ``only``; its records and what it left."""
    from ..analysis.cached import analysis_of

    graph = model.graph
    nodes = list(graph)
    analysis = analysis_of(model)
    backward = {nodes[i] for i in analysis.boundary.backward}
    ed = IrGraphEditor(graph, ir_taken_names(graph), PREFIX)
    records: list[PassRecord] = []
    skipped: list[Skipped] = []
    for bn in [n for n in nodes if n.op_type == "BatchNormInternal" and n.domain == _MS and n not in backward
               and (only is None or (len(n.outputs) > 3 and n.outputs[3] is not None and n.outputs[3].name in only))]:
        why = _site(bn, backward, analysis)
        if why is not None:
            skipped.append(Skipped(_label(bn), PATTERN, why))
            continue
        detail = _detach(graph, bn, backward, ed, analysis)
        # ORT cannot size the copies before the run (the point); their bytes ride along in the metadata so a later
        # analysis (inspect, a second transform) sizes them instead of refusing them as unresolved.
        merge_size_hints(model.metadata_props, {v: detail["bytes"] // 2 for v in detail["copies"]})
        records.append(PassRecord("moved", pass_name, _label(bn), {"technique": "detach_stats", **detail}))
    return records, skipped


def _replayed(model: ir.Model) -> "PatternBlock":
    from ..analysis.cached import snapshot_of
    from ..planner.ort_pattern import replay_pattern_block

    return replay_pattern_block(snapshot_of(model))


def _pinning(block: "PatternBlock", sites: dict[str, tuple[str, str]], skip: set[str]) -> list[str]:
    """The BatchNorms (of ``sites``: name → its two statistics, less ``skip``) whose statistics' buffers sit
    below the block's highest allocation while it is live, highest first: the small blocks that may be what
    keeps that allocation up."""
    plan = block.plan
    top = max(block.offsets, key=lambda b: sum(block.offsets[b]))
    s, e, top_at = plan.start[top], plan.end[top], block.offsets[top][0]
    found: dict[str, int] = {}
    for bn, stats in sites.items():
        if bn in skip:
            continue
        for v in stats:
            b = plan.buffer.get(v)
            if b in block.offsets and b in plan.start and plan.start[b] <= e and plan.end[b] >= s \
                    and block.offsets[b][0] < top_at:
                found[bn] = max(found.get(bn, -1), block.offsets[b][0])
    return sorted(found, key=lambda bn: -found[bn])


def _copy(model: ir.Model) -> ir.Model:
    return ir.serde.deserialize_model(ir.serde.serialize_model(model))


class DetachStatsPass(OnnxcompPass):
    """BatchNorm saved statistics copied, right after the BatchNorm, into tensors ORT sizes only at run time, so
    they are held outside its memory-pattern block (module docstring). ``only_lowering``: choose the BatchNorms
    on the replayed pattern block: those whose statistics sit below its highest allocation while that is live,
    highest first, one trial each (at most ``max_trials``, stopping after ``patience`` trials in a row that did
    not lower it), each kept only where the block drops. Without it every BatchNorm the pass can rewrite is
    rewritten. Cost: one graph copy and one replay per trial (~0.5 s each on ResNet-18's 600-node graph)."""

    name = "detach_stats"

    def __init__(self, only_lowering: bool = True, max_trials: int = 12, patience: int = 4) -> None:
        super().__init__()
        self.only_lowering = only_lowering
        self.max_trials, self.patience = max_trials, patience

    def call(self, model: ir.Model) -> PassOutcome:
        from ..analysis.cached import analysis_of

        outcome = PassOutcome(model, False)
        if not any(n.op_type == "BatchNormInternal" and n.domain == _MS for n in model.graph):
            return outcome
        only: set[str] | None = None
        sizes: list[int] | None = None
        if self.only_lowering:
            nodes = list(model.graph)
            analysis = analysis_of(model)
            backward = {nodes[i] for i in analysis.boundary.backward}
            # keyed by the saved mean's name (unique; a node may be unnamed)
            sites = {n.outputs[3].name: (n.outputs[3].name, n.outputs[4].name) for n in nodes
                     if n.op_type == "BatchNormInternal" and n.domain == _MS and n not in backward
                     and _site(n, backward, analysis) is None}
            if not sites:
                return outcome
            block = _replayed(model)
            sizes = [block.size, block.size]
            only, tried, misses = set(), set(), 0
            for _ in range(self.max_trials):
                picks = _pinning(block, sites, only | tried)
                if not picks or misses >= self.patience:
                    break
                tried.add(picks[0])
                trial = _copy(model)
                detach_statistics(trial, self.name, only | {picks[0]})
                trial_block = _replayed(trial)
                if trial_block.size < block.size:
                    only.add(picks[0])
                    block, misses = trial_block, 0
                else:
                    misses += 1
            sizes[1] = block.size
            if not only:
                why = (f"no BatchNorm's statistics found whose detaching lowers the replayed pattern block "
                       f"({sizes[0]} B)")
                outcome.skipped += [Skipped(mean, PATTERN, why) for mean in sites]
                return outcome
        outcome.records, outcome.skipped = detach_statistics(model, self.name, only)
        if sizes is not None:
            for r in outcome.records:
                r.detail["pattern_block_bytes"] = sizes
            outcome.skipped += [Skipped(mean, PATTERN, "detaching these statistics did not lower the replayed pattern "
                                        "block (or was not tried)") for mean in sites if mean not in only]
        outcome.modified = bool(outcome.records)
        return outcome
