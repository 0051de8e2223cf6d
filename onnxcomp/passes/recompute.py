"""Pass: drop cheap stashed activations and recompute them in backward, just before their first reader.

A stash made by a chain of cheap, deterministic ops (BatchNorm, ReLU, Add, pooling, views ...) from
tensors that stay alive until its backward reader anyway (other stashes such as Conv outputs kept for
BatchNormalizationGrad, weights, graph inputs) is rebuilt by cloning that chain right before the reader;
only the backward readers are rewired, so the original is freed after its last forward use. The clones
are the very same ops with the very same inputs, so the recomputed tensor is bit-identical.

Ordering (platform notes, "Execution order"): clones whose inputs all exist since forward could run in
the forward pass (defeating the saving) under either of ORT's orders. So every clone that reads no other
clone of its group reads its first input through ``Reshape(x, shape + Cast(Less(t, t), int64))``, where
``t`` is one element of the reader's incoming gradient dY: ``Less(t, t)`` is false for every value (NaN
and ±Inf included), so the shape is always exact and the Reshape is a zero-copy view, but ORT can neither
constant-fold it nor run it before dY exists (profiling traces in tests/test_recompute.py check both).
The view is the graph editor's one gate (``IrGraphEditor.gate``); the pass edits the onnx-ir graph through
use/def links, choosing what to rebuild from the cached analysis.

Training-mode BatchNorm writes its running statistics into its running-statistics inputs (ORT aliases
them), so a clone reads dY-gated scratch copies of those instead: the state is updated once, as before.

After an encoding policy, ``replace_encoded=True`` also recomputes tensors held by an exact encoding
(sparse, MaxPool indices) and removes that encoder and decoder: no payload is held for them at all.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import onnx
import onnx_ir as ir
from onnx import helper

from ..analysis import GraphAnalysis, StashedTensor, TensorClass, analysis_of
from ..analysis.patterns import StashUse
from ..custom_ops import contract
from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, Skipped
from .editor import IrGraphEditor, ir_taken_names, unique_name
from .encode_stash import already_encoded, is_native_anchor
from .records import PassRecord

# Cheap, deterministic, side-effect-free ops: recomputing them costs little next to a Conv/Gemm.
CHEAP_OPS: frozenset[str] = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
    "Neg", "Abs", "Add", "Sub", "Mul", "Div",
    "BatchNormInternal", "BatchNormalization",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "Concat", "ConcatTraining", "Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze", "Transpose", "Constant",
})
# Never cloned, whatever the caller asks: randomness (a clone would draw different numbers), side
# effects (in-place accumulation, optimizer updates), or our own PyOps.
_FORBIDDEN_OPS = frozenset({
    "Dropout", "BitmaskDropout", "BiasDropout", "BitmaskBiasDropout", "RandomNormal", "RandomUniform",
    "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "TrainableDropout",
    "InPlaceAccumulator", "InPlaceAccumulatorV2", "ZeroGradient", "AdamWOptimizer", "SGDOptimizerV2",
    "YieldOp", "PythonOp", "PyOp",
})
# The com.microsoft ops we know to be pure: ORT's training graph turns every Concat into ConcatTraining (a copy
# plus its inputs' lengths along the axis for the gradient's split), so a dense block's concatenated features
# are rebuilt exactly from the pieces.
_MS_DOMAIN_OPS = frozenset({"BatchNormInternal", "ConcatTraining"})
DEFAULT_MAX_DEPTH = 4
# Why a stash is not rebuilt in a joint run: another recomputation reads it (asked for alone, it may be).
PINNED_REASON = "kept: another recomputed tensor is rebuilt from it"
# Codecs whose decoder returns exactly the tensor their encoder read: such an encoding can be replaced by
# recomputing that tensor (signbits cannot: its decoder returns signs, not the values).
EXACT_CODECS = frozenset({"sparse", "zvc", "csr", "maxpool_index"})
# BatchNorm's running-statistics outputs alias its running-statistics inputs in ORT (the kernel updates
# the checkpoint state in place, and crashes if the outputs are left out): a clone reading the real
# running statistics would apply the momentum update twice. Its running-statistics inputs are scratch
# copies instead; in training mode they do not enter Y.
_BN_RUNNING_INPUTS = {"BatchNormInternal": (3, 4), "BatchNormalization": (3, 4)}


@dataclass
class _Encoded:
    """An exact encoding (encoder in forward, decoder in backward) that recomputation would replace."""
    codec: str
    encoder: int                        # node indices (the analysis' node order)
    decoder: int
    decoded: str                        # what the backward readers read now
    payload_bytes: int


class RecomputeEntry(NamedTuple):
    """How ``RecomputePass`` rebuilds one stash, as its record's detail says (``RecomputePass.plan_table``)."""
    cloned_ops: list[str]              # op types of the cloned chain, producers first
    inputs_kept: list[str]             # stashes read as they are
    inputs_extended: list[str]         # forward tensors (no stashes) kept alive until the reader


@dataclass
class _Plan:
    """How one stash is rebuilt at its first backward reader."""
    stash: StashedTensor
    consumer: int                       # node index (analysis' order) of the first backward reader
    grad: str                           # the reader's incoming gradient, the trigger source
    nodes: list[int]                    # producer node indices to clone, topological
    leaves: list[str]                   # tensors read as they are (persistent or alive until consumer)
    reused: dict[str, str] = field(default_factory=dict)   # original tensor -> clone from an earlier reader
    alias: dict[str, str] = field(default_factory=dict)    # anchored view -> the tensor it views
    replaces: _Encoded | None = None
    extended: list[str] = field(default_factory=list)       # forward tensors read as they are (not stashes)


class RecomputePass(OnnxcompPass):
    """Recompute chosen stashes in backward instead of holding them.

    tensors: explicit stash names (each must be a stashed tensor of the graph); None applies the default
    rule: every stash produced by one of ``ops`` (default CHEAP_OPS) of at least ``min_bytes``.
    max_depth: longest chain of cloned ops from the stash back to kept tensors.
    ops: op types that may be cloned (random and side-effecting ops never are).
    reuse_clones: a later reader may read a tensor already recomputed for an earlier backward reader
    (e.g. the MaxPool indices recomputed with the MaxPool output) instead of cloning it again.
    replace_encoded: also consider tensors held by an exact encoding (EXACT_CODECS, e.g. after the
    lossless policy): where one can be recomputed, its encoder and decoder are removed and its payload
    is not held at all. Off by default: other encodings are respected as they are.
    extend_fraction: a forward tensor no backward op reads and no allowed op can rebuild (a dense layer's
    new features, a Conv output read only by a Concat) may be read as it is, kept alive until the reader,
    while all such tensors of one stash total at most this fraction of its bytes (0: never). A
    concatenation is then rebuilt from its small new piece and the stash it extends (exact: a copy).
    """

    name = "recompute"
    encoding = "recompute"

    def __init__(self, tensors: Iterable[str] | None = None, max_depth: int = DEFAULT_MAX_DEPTH,
                 ops: Iterable[str] | None = None, min_bytes: int = 0, reuse_clones: bool = True,
                 replace_encoded: bool = False, extend_fraction: float = 0.0) -> None:
        if isinstance(tensors, str):
            raise OnnxcompError("RecomputePass(tensors=...) takes an iterable of stash names, not one string")
        if max_depth < 1:
            raise OnnxcompError(f"RecomputePass max_depth must be >= 1 (got {max_depth})")
        if min_bytes < 0:
            raise OnnxcompError(f"RecomputePass min_bytes must be >= 0 (got {min_bytes})")
        self.tensors = None if tensors is None else list(dict.fromkeys(tensors))
        self.max_depth = max_depth
        self.ops = frozenset(CHEAP_OPS if ops is None else ops)
        bad = sorted(self.ops & _FORBIDDEN_OPS)
        if bad:
            raise OnnxcompError(f"RecomputePass cannot clone {bad}: random or side-effecting ops are never "
                                "recomputed")
        self.min_bytes = min_bytes
        self.reuse_clones = reuse_clones
        self.replace_encoded = replace_encoded
        if not 0.0 <= extend_fraction < 1.0:
            raise OnnxcompError(f"RecomputePass extend_fraction must be in [0, 1) (got {extend_fraction})")
        self.extend_fraction = extend_fraction

    def call(self, model: ir.Model) -> PassOutcome:
        analysis = analysis_of(model)
        outcome = PassOutcome(model, False)
        candidates, replacing = self._candidates(analysis, outcome.skipped)
        plans, wanted = self._plans(analysis, candidates, replacing, outcome.skipped)
        if plans:
            outcome.records = _rewrite(model.graph, analysis, plans, wanted)
            outcome.modified = True
        return outcome

    def plan_table(self, analysis: GraphAnalysis) -> tuple[dict[str, RecomputeEntry], list[Skipped]]:
        """What ``call`` would rebuild on ``analysis``'s graph, without rewriting it: per stash it rebuilds, the
        op types cloned, the stashes read whole and the forward tensors kept alive (its record's ``cloned_ops``,
        ``inputs_kept``, ``inputs_extended``), and the stashes it skips with why. The same selection and plans as
        ``call`` (``_candidates``, ``_plans``): only the rewrite is left out. For callers that ask many questions
        of one graph (the auto planner's recompute tables ask one per stash): one analysis answers them all, where
        ``run`` loads, rewrites, checks and serialises the whole graph each time (~75k nodes on ResNet-18 at batch
        1872 once chunked: docs/notes/maxbatch8.md section 3)."""
        skipped: list[Skipped] = []
        candidates, replacing = self._candidates(analysis, skipped)
        plans, _ = self._plans(analysis, candidates, replacing, skipped)
        graph = analysis.model.graph
        table = {p.stash.name: RecomputeEntry([graph.node[i].op_type for i in p.nodes], _kept(analysis, p),
                                              list(p.extended)) for p in plans}
        return table, skipped

    # -- selection -------------------------------------------------------------------------------------
    def _candidates(self, analysis: GraphAnalysis,
                    skipped: list[Skipped]) -> tuple[list[StashedTensor], dict[str, _Encoded]]:
        """The stashes worth rebuilding (asked for, or by the default rule), and which of them an exact
        encoding holds now (by stash name)."""
        by_name = {s.name: s for s in analysis.stashed}
        encoded = self._encoded(analysis) if self.replace_encoded else []
        if self.tensors is not None:
            known = set(by_name) | {stash.name for stash, _ in encoded}
            missing = [t for t in self.tensors if t not in known]
            if missing:
                raise OnnxcompError(f"RecomputePass: {missing} are not stashed tensors of this graph (forward "
                                    "tensors read in backward); `onnxcomp inspect` lists them")
            chosen = [by_name[t] for t in self.tensors if t in by_name]
        else:
            chosen = list(analysis.stashed)
        candidates: list[StashedTensor] = []
        for stash in chosen:
            reason = self._reject(analysis, stash)
            if reason:
                skipped.append(Skipped(stash.name, stash.pattern, reason))
            else:
                candidates.append(stash)
        replacing: dict[str, _Encoded] = {}
        for stash, enc in encoded:
            if self.tensors is not None and stash.name not in self.tensors:
                continue
            if isinstance(enc, str):
                skipped.append(Skipped(stash.name, stash.pattern, enc))
            else:
                candidates.append(stash)
                replacing[stash.name] = enc
        # Deepest layers first (earliest backward reader): later readers can then reuse their clones.
        candidates.sort(key=lambda s: (min(s.backward_consumers), s.producer or 0, s.name))
        return candidates, replacing

    def _plans(self, analysis: GraphAnalysis, candidates: list[StashedTensor], replacing: dict[str, _Encoded],
               skipped: list[Skipped]) -> tuple[list[_Plan], set[str]]:
        """How each candidate is rebuilt (in order), and the tensors a plan may read from a clone."""
        graph = analysis.model.graph
        by_name = {s.name: s for s in analysis.stashed}
        persistent = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        wanted = {s.name for s in candidates}   # optional outputs worth cloning (see _optional_indices)
        undecided = set(wanted)
        recomputed: set[str] = set()
        pinned: set[str] = set()        # stashes some plan reads as they are: never recompute them
        clones: dict[str, int] = {}     # original tensor -> consumer index it was first recomputed for
        plans: list[_Plan] = []
        for stash in candidates:
            undecided.discard(stash.name)
            if stash.name in pinned:
                skipped.append(Skipped(stash.name, stash.pattern, PINNED_REASON))
                continue
            # First try to rebuild through the still undecided candidates (so they can be dropped too);
            # failing that, read them as they are (which keeps them).
            enc = replacing.get(stash.name)
            plan = self._plan(analysis, stash, persistent, by_name, recomputed, clones, undecided, enc)
            if isinstance(plan, str):
                plan = self._plan(analysis, stash, persistent, by_name, recomputed, clones, set(), enc)
                if not isinstance(plan, str):
                    # Keeping bigger stashes than this one to rebuild it would lose memory overall.
                    held = [leaf for leaf in plan.leaves if leaf in undecided]
                    if sum(by_name[h].nbytes for h in held) > stash.nbytes:
                        plan = (f"rebuilding it would keep {', '.join(held)} (more bytes than it saves); "
                                f"a chain through them needs more than max_depth={self.max_depth} ops")
            if isinstance(plan, str):
                skipped.append(Skipped(stash.name, stash.pattern, plan))
                continue
            recomputed.add(stash.name)
            pinned.update(leaf for leaf in plan.leaves if leaf in by_name)
            for idx in plan.nodes:
                node = graph.node[idx]
                for k, out in enumerate(node.output):
                    if out and (not _optional_indices(node, k) or out in wanted):
                        clones.setdefault(out, plan.consumer)
            plans.append(plan)
        return plans, wanted

    def _reject(self, analysis: GraphAnalysis, stash: StashedTensor) -> str | None:
        graph = analysis.model.graph
        if stash.producer is None:
            return "a graph input: nothing to recompute it from"
        if already_encoded(analysis, stash.name):
            return "already encoded by another pass"
        if any(contract.is_decoder(graph.node[c].domain, graph.node[c].op_type) for c in stash.backward_consumers):
            return "an encoding's payload (read by a decoder): recompute the encoded tensor instead"
        if stash.pattern.startswith("BatchNorm-stats") and self.tensors is None:
            return "per-channel BatchNorm statistics: tiny, and rebuilding them costs a whole BatchNorm"
        if stash.nbytes < self.min_bytes:
            return f"only {stash.nbytes} bytes (< min_bytes {self.min_bytes})"
        why = self._op_problem(graph.node[stash.producer])
        if why:
            return why
        if self._trigger(analysis, min(stash.backward_consumers), stash.name) is None:
            return "its first backward reader has no incoming gradient to time the recomputation by"
        return None

    def _trigger(self, analysis: GraphAnalysis, consumer: int, name: str) -> str | None:
        """The gradient the clones for ``consumer`` (reading ``name``) wait on: its incoming dY."""
        return analysis.incoming_gradient(consumer, name)

    def _op_problem(self, node: onnx.NodeProto) -> str | None:
        op = node.op_type
        if op in _FORBIDDEN_OPS or contract.codec_op(node.domain, op) is not None or "Random" in op \
                or "Dropout" in op:
            return f"produced by {op}: random or side-effecting ops are never recomputed"
        if node.domain not in ("", "ai.onnx") and op not in _MS_DOMAIN_OPS:
            return f"produced by {node.domain}.{op}: not known to be pure"
        if op not in self.ops:
            return f"produced by {op}: not among the ops this pass clones"
        return None

    def _plan(self, analysis: GraphAnalysis, stash: StashedTensor, persistent: set[str],
              by_name: dict[str, StashedTensor], recomputed: set[str], clones: dict[str, int],
              avoid: set[str], enc: _Encoded | None = None) -> _Plan | str:
        consumer = min(stash.backward_consumers)
        grad = self._trigger(analysis, consumer, enc.decoded if enc else stash.name)
        assert grad is not None  # checked in _reject
        search = _PlanSearch(self, analysis, stash, consumer, persistent, by_name, recomputed, clones, avoid)
        if search.visit(stash.name, True) is None:
            return search.problem[0] if search.problem else "cannot be rebuilt from kept tensors"
        return _Plan(stash, consumer, grad, search.nodes, sorted(set(search.leaves)), search.reused, search.alias,
                     enc, sorted(set(search.extended)))

    def _encoded(self, analysis: GraphAnalysis) -> list[tuple[StashedTensor, _Encoded | str]]:
        """The tensors exact encodings hold, as stash records (readers: the decoder's readers), each with
        the encoding recomputation would replace or why it cannot."""
        out: list[tuple[StashedTensor, _Encoded | str]] = []
        for d_idx, dec in enumerate(analysis.model.graph.node):
            op = contract.codec_op(dec.domain, dec.op_type)
            if op is None or op.role != "decode" or len(dec.input) < 2:
                continue
            first = analysis.tensors.get(dec.input[0])
            if first is None or first.producer is None:
                continue
            stash = _encoded_stash(analysis, first.producer, dec, op.codec)
            out.append((stash, self._replaceable(analysis, stash, first.producer, d_idx, op.codec)))
        return out

    def _replaceable(self, analysis: GraphAnalysis, stash: StashedTensor, e_idx: int, d_idx: int,
                     codec: str) -> _Encoded | str:
        """The encoding (encoder ``e_idx``, decoder ``d_idx``) of ``stash`` if recomputing the tensor can
        replace it, else why not."""
        graph = analysis.model.graph
        enc, dec = graph.node[e_idx], graph.node[d_idx]
        payload = contract.payload_outputs(enc)
        readers = stash.backward_consumers
        if codec not in EXACT_CODECS:
            return f"held by {codec}, whose decoder does not return the tensor itself"
        if contract.payload_inputs(dec) != payload or any(
                set(analysis.tensors[p].consumers) != {d_idx} for p in payload):
            return f"its {codec} payload is read by more than its decoder"
        if not readers or any(not analysis.boundary.is_backward(c) for c in readers):
            return f"its {codec} decoder has no backward readers"
        why = (self._op_problem(graph.node[stash.producer]) if stash.producer is not None
               else "a graph input: nothing to recompute it from")
        if why:
            return why
        if analysis.incoming_gradient(min(readers), dec.output[0]) is None:
            return "its first backward reader has no incoming gradient to time the recomputation"
        payload_bytes = sum(analysis.tensors[p].nbytes for p in payload)
        return _Encoded(codec, e_idx, d_idx, dec.output[0], payload_bytes)


@dataclass
class _PlanSearch:
    """The forward subgraph that rebuilds one stash for its first backward reader: a depth-first walk from
    the stash down to tensors kept until that reader anyway (leaves), clones made for earlier readers
    (reused) or an encoder's anchor view (seen through). ``nodes`` in post-order (producers first); the
    first reason the stash cannot be rebuilt goes to ``problem``."""
    recompute: "RecomputePass"
    analysis: GraphAnalysis
    stash: StashedTensor
    consumer: int
    persistent: set[str]
    by_name: dict[str, StashedTensor]
    recomputed: set[str]
    clones: dict[str, int]
    avoid: set[str]
    nodes: list[int] = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)
    reused: dict[str, str] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)
    depth_of: dict[str, int] = field(default_factory=dict)   # tensor -> longest cloned chain below it (0: leaf)
    problem: list[str] = field(default_factory=list)
    extended: list[str] = field(default_factory=list)        # forward tensors kept alive until the reader

    def usable_as_is(self, name: str) -> bool:
        if name in self.persistent:
            return True
        s = self.by_name.get(name)
        # Another stash: fine if it outlives the reader anyway and is not itself dropped.
        return (s is not None and name not in self.recomputed and name not in self.avoid
                and name != self.stash.name and max(s.backward_consumers) >= self.consumer)

    def visit(self, name: str, root: bool) -> int | None:
        """Depth of the cloned chain that makes ``name`` (0: read as it is), or None if it cannot be made."""
        if name in self.depth_of:
            return self.depth_of[name]
        if not root and self.usable_as_is(name):
            self.leaves.append(name)
            return self._at(name, 0)
        if self.recompute.reuse_clones and name in self.clones and self.clones[name] <= self.consumer:
            self.reused[name] = name   # read from the clone made for an earlier reader
            return self._at(name, 0)
        t = self.analysis.tensors.get(name)
        if t is None or t.producer is None:
            return self._fail(f"needs {name!r}, which is not kept until the reader")
        if self.analysis.boundary.is_backward(t.producer):
            return self._fail(f"needs backward tensor {name!r}")
        graph = self.analysis.model.graph
        node = graph.node[t.producer]
        if _is_anchor_view(graph, self.analysis, node):
            return self._through_view(name, node)
        why = self.recompute._op_problem(node)
        if why and self._extendable(name, t):
            self.extended.append(name)
            self.leaves.append(name)
            return self._at(name, 0)
        if why:
            kept = "" if name not in self.by_name else " (a recomputed or short-lived stash)"
            return self._fail(f"needs {name!r}{kept}, {why}")
        return self._clone(t.producer, node)

    def _extendable(self, name: str, t: Any) -> bool:
        """May ``name`` (no stash, made by an op this pass does not clone) be kept alive until the reader?"""
        if name in self.by_name or self.analysis.tensors[name].nbytes <= 0:
            return False
        if any(self.analysis.boundary.is_backward(c) for c in t.consumers):
            return False
        total = sum(self.analysis.tensors[n].nbytes for n in {*self.extended, name})
        return total <= self.recompute.extend_fraction * self.stash.nbytes

    def _through_view(self, name: str, node: onnx.NodeProto) -> int | None:
        """Reshape(x, anchor) made by an encoding pass: a zero-copy view of x; rebuild x instead."""
        d = self.visit(node.input[0], False)
        if d is None:
            return None
        self.alias[name] = node.input[0]
        return self._at(name, d)

    def _clone(self, index: int, node: onnx.NodeProto) -> int | None:
        """``node`` cloned once all its inputs can be had: one deeper than its deepest input."""
        deepest = 0
        for i in node.input:
            if not i:
                continue
            d = self.visit(i, False)
            if d is None:
                return None
            deepest = max(deepest, d)
        depth = deepest + 1
        if depth > self.recompute.max_depth:
            return self._fail(f"rebuilding it needs a chain of more than max_depth={self.recompute.max_depth} ops")
        for out in node.output:
            if out:
                self.depth_of[out] = depth
        if index not in self.nodes:
            self.nodes.append(index)   # post-order: inputs' producers first
        return depth

    def _at(self, name: str, depth: int) -> int:
        self.depth_of[name] = depth
        return depth

    def _fail(self, why: str) -> None:
        self.problem.append(why)
        return None


def _encoded_stash(analysis: GraphAnalysis, e_idx: int, dec: onnx.NodeProto, codec: str) -> StashedTensor:
    """The tensor encoder ``e_idx`` reads, as the stash record it would be without the encoding: its
    backward readers are the decoder's."""
    graph = analysis.model.graph
    target = graph.node[e_idx].input[0]
    t = analysis.tensors[target]
    readers = sorted(analysis.tensors[dec.output[0]].consumers)
    fwd = [c for c in t.consumers if not analysis.boundary.is_backward(c)]
    producer_op = graph.node[t.producer].op_type if t.producer is not None else ""
    use = StashUse(producer_op, list(graph.node[t.producer].output).index(target) if t.producer is not None
                   else 0, tuple(graph.node[c].op_type for c in fwd),
                   tuple((graph.node[c].op_type, list(graph.node[c].input).index(dec.output[0]))
                         for c in analysis.tensors[dec.output[0]].consumers), t.type.dtype.kind == "f")
    ops = sorted({graph.node[c].op_type for c in readers})
    return StashedTensor(target, t.shape, t.type.dtype.name, t.nbytes, t.producer, producer_op, fwd,
                         readers, [graph.node[c].op_type for c in readers],
                         f"{codec}-encoded {producer_op or 'input'}-output→{'/'.join(ops)}", (), use)


def _is_anchor_view(graph: onnx.GraphProto, analysis: GraphAnalysis, node: onnx.NodeProto) -> bool:
    if node.op_type != "Reshape" or len(node.input) < 2:
        return False
    shape = analysis.tensors.get(node.input[1])
    if shape is None or shape.producer is None:
        return False
    maker = graph.node[shape.producer]
    return contract.is_encoder(maker.domain, maker.op_type) or is_native_anchor(maker.name)


def _optional_indices(node: onnx.NodeProto | ir.Node, k: int) -> bool:
    """Outputs a clone leaves out unless they are themselves recomputed: MaxPool's int64 indices are
    twice the size of its values."""
    return node.op_type == "MaxPool" and k == 1


def _training_mode(node: ir.Node) -> bool:
    if node.op_type == "BatchNormInternal":
        return True   # ORT's training-mode BatchNorm; training_mode attribute absent means training
    mode = node.attributes.get("training_mode")
    return (mode is not None and bool(mode.value)) or len(node.outputs) > 1


# ---------------------------------------------------------------------------------------------------------
# The rewrite, on the onnx-ir graph. Plans name tensors and index nodes as the analysis does (the analysis
# snapshot lists the graph's nodes in the same order); everything else goes by use/def links.

@dataclass
class _Rewrite:
    """What rebuilding one plan needs from the others: the graph, its nodes by analysis index, the names in
    use, each original tensor's first recomputed copy, and per reader the zero its gates wait on."""
    graph: ir.Graph
    nodes: list[ir.Node]
    analysis: GraphAnalysis
    wanted: set[str]                    # tensors some plan may read from a clone (optional outputs kept)
    taken: set[str]
    clone_of: dict[ir.Value, ir.Value] = field(default_factory=dict)
    zero: dict[int, ir.Value] = field(default_factory=dict)       # consumer -> int64 [1] zero made from dY
    zero_like: dict[tuple[int, ir.DataType], ir.Value] = field(default_factory=dict)   # ... cast to a type
    clones: list[ir.Node] = field(default_factory=list)           # every clone made, in order

    def editor(self, prefix: str = "onnxcomp") -> IrGraphEditor:
        return IrGraphEditor(self.graph, self.taken, prefix)

    def type_of(self, name: str) -> tuple[ir.DataType, list[int] | None]:
        """Element type and shape of an original tensor (the analysis knows them where the graph does not)."""
        t = self.analysis.tensors[name].type
        return ir.DataType(helper.np_dtype_to_tensor_dtype(t.dtype)), (list(t.shape) if t.shape is not None else None)


def _rewrite(graph: ir.Graph, analysis: GraphAnalysis, plans: list[_Plan], wanted: set[str]) -> list[PassRecord]:
    """Every plan's clones inserted just before its reader, the readers rewired; one record per plan."""
    rw = _Rewrite(graph, list(graph), analysis, wanted, ir_taken_names(graph))
    records = [PassRecord("recomputed", RecomputePass.name, plan.stash.name, _rebuild(rw, plan)) for plan in plans]
    _drop_unread_optional_outputs(graph)
    _release_unread_clones(rw)
    return records


_RELEASE_BYTES = 64 << 10


def _release_unread_clones(rw: _Rewrite) -> None:
    """A clone read for some outputs only (a recomputed MaxPool whose indices MaxPoolGrad reads: its values,
    a required output, are read by nothing) would hold the unread ones to the end of the step (ORT frees a
    buffer after its last reader; ``GraphAnalysis.unread``): its read outputs wait for them instead
    (``IrGraphEditor.release_unread``), gates placed right behind the clone."""
    def large_unread(node: ir.Node) -> bool:   # per-channel statistics a BatchNorm clone leaves are not worth a gate
        return any(o.name and not o.uses() and o.shape is not None and o.shape.is_static() and
                   math.prod(int(d) for d in o.shape) * o.dtype.itemsize >= _RELEASE_BYTES
                   for o in node.outputs if o.dtype is not None)

    clones = [n for n in rw.clones if n.graph is rw.graph and large_unread(n)]
    if not clones:
        return
    editor = rw.editor()
    editor.nodes[:] = clones
    editor.release_unread()
    members = set(clones)
    previous = None
    for node in editor.nodes:
        if node in members:
            previous = node
        else:
            rw.graph.insert_after(previous, [node])
            previous = node


def _rebuild(rw: _Rewrite, plan: _Plan) -> dict[str, Any]:
    """One plan: clone its chain (gated on the reader's dY) before the reader, rewire the backward readers,
    and drop the encoding it replaces. Returns the record's detail."""
    reader = rw.nodes[plan.consumer]
    # The reader's own dY, or (a recompute gate's reader: RecomputePass._trigger) a gradient made before it.
    grad = next((v for v in reader.inputs if v is not None and v.name == plan.grad), None) or next(
        v for n in rw.nodes for v in n.outputs if v.name == plan.grad)
    out: list[ir.Node] = []
    local: dict[ir.Value, ir.Value] = {}       # original tensor -> its clone made for this reader
    gated: dict[ir.Value, ir.Value] = {}
    for idx in plan.nodes:
        _clone(rw, plan, rw.nodes[idx], grad, local, gated, out)
    for original, copy in local.items():
        rw.clone_of.setdefault(original, copy)
    stash = _output_named(rw.nodes[plan.stash.producer], plan.stash.name)
    source = local[stash] if stash in local else rw.clone_of[stash]
    read_as = rw.nodes[plan.replaces.decoder].outputs[0] if plan.replaces is not None else stash
    for c in plan.stash.backward_consumers:
        replace_input(rw.nodes[c], read_as, source)
    rw.graph.insert_before(reader, out)
    if plan.replaces is not None:
        _drop_encoding(rw, plan.replaces)
    return _detail(rw, plan, source, [rw.nodes[idx].op_type for idx in plan.nodes])


def _clone(rw: _Rewrite, plan: _Plan, node: ir.Node, grad: ir.Value, local: dict[ir.Value, ir.Value],
           gated: dict[ir.Value, ir.Value], out: list[ir.Node]) -> None:
    """The clone of ``node`` for ``plan``'s reader (appended to ``out``), reading earlier clones of its group,
    reused clones of earlier readers, or the kept tensors themselves."""
    resolved = [_viewed(v, plan.alias) for v in node.inputs]
    inputs: list[ir.Value | None] = []
    for v in resolved:
        if v is None:
            inputs.append(None)
        elif v in local:
            inputs.append(local[v])
        elif v.name in plan.reused:
            inputs.append(rw.clone_of[v])
        else:
            inputs.append(v)
    if node.op_type in _BN_RUNNING_INPUTS and _training_mode(node):
        for k in _BN_RUNNING_INPUTS[node.op_type]:
            if k < len(inputs) and inputs[k] is not None:
                inputs[k] = _scratch(rw, plan, grad, inputs[k], resolved[k].name, out)
    # A clone that reads no clone of this group could run as soon as its inputs exist (in forward):
    # its first input goes through a view that waits for dY.
    # (Input-less nodes, i.e. Constant, are folded by ORT and need no gate.)
    present = [k for k, v in enumerate(resolved) if v is not None]
    if present and not any(resolved[k] in local for k in present):
        first = present[0]
        inputs[first] = _gate(rw, plan, grad, inputs[first], resolved[first].name, out, gated)
    outputs: list[tuple[str, ir.DataType, list[int] | None] | None] = []
    originals: list[ir.Value | None] = []
    for k, o in enumerate(node.outputs):
        if not o.name:
            outputs.append(None)
            originals.append(None)
        elif not _optional_indices(node, k) or o.name in rw.wanted:
            outputs.append((unique_name(f"{o.name}__recomputed", rw.taken), *rw.type_of(o.name)))
            originals.append(o)
    editor = rw.editor()
    copy = editor.clone(node, inputs, outputs, name=unique_name(f"{node.name or node.op_type}__recompute", rw.taken))
    rw.clones.append(copy)
    out += editor.nodes
    local.update((o, c) for o, c in zip(originals, copy.outputs) if o is not None)


def _zero_for(rw: _Rewrite, plan: _Plan, grad: ir.Value, out: list[ir.Node]) -> ir.Value:
    """The int64 [1] zero computed from one element of the reader's dY (one per reader): always 0, never
    foldable."""
    if plan.consumer not in rw.zero:
        editor = rw.editor()
        base = plan.grad.replace("/", "_").strip("_") + "__recompute"
        rw.zero[plan.consumer] = editor.zero_after(grad, rw.type_of(plan.grad)[0], base=base)
        out += editor.nodes
    return rw.zero[plan.consumer]


def _gate(rw: _Rewrite, plan: _Plan, grad: ir.Value, value: ir.Value, like: str, out: list[ir.Node],
          gated: dict[ir.Value, ir.Value]) -> ir.Value:
    """A view of ``value`` (typed like the original tensor ``like``) that cannot exist before the reader's
    dY: the editor's gate on the reader's zero."""
    if value not in gated:
        zero = _zero_for(rw, plan, grad, out)
        base = like.replace("/", "_").strip("_")
        elem, shape = rw.type_of(like)
        editor = rw.editor(prefix=f"{base}__recompute")
        gated[value] = editor.gate(value, after=grad, shape=shape, elem=elem, zero=zero,
                                   name=f"{base}__recompute_gated")
        out += editor.nodes
    return gated[value]


def _scratch(rw: _Rewrite, plan: _Plan, grad: ir.Value, value: ir.Value, like: str, out: list[ir.Node]) -> ir.Value:
    """A fresh buffer with ``value``'s values (+0.0), for a kernel that writes into that input."""
    zero = _zero_for(rw, plan, grad, out)
    elem, shape = rw.type_of(like)
    editor = rw.editor()
    key = (plan.consumer, elem)
    if key not in rw.zero_like:
        dtype = rw.analysis.tensors[like].type.dtype.name
        rw.zero_like[key] = editor.op("Cast", [zero], "", elem, [1], out=f"{zero.name}_{dtype}", to=elem)
    copy = editor.op("Add", [value, rw.zero_like[key]], "", elem, shape,
                     out=f"{like.replace('/', '_').strip('_')}__recompute_scratch")
    out += editor.nodes
    return copy


def _kept(analysis: GraphAnalysis, plan: _Plan) -> list[str]:
    """The stashes ``plan`` reads as they are (its record's ``inputs_kept``)."""
    return [leaf for leaf in plan.leaves if analysis.tensors[leaf].cls is TensorClass.STASHED]


def _detail(rw: _Rewrite, plan: _Plan, source: ir.Value, cloned_ops: list[str]) -> dict[str, Any]:
    reader = rw.nodes[plan.consumer]
    kept = _kept(rw.analysis, plan)
    parts = [f"rebuilt from {', '.join(kept) or 'weights and inputs'}"] if plan.nodes else []
    if plan.reused:
        parts.append(f"reuses {', '.join(sorted(plan.reused))} recomputed for an earlier reader")
    if plan.extended:
        parts.append(f"keeps {', '.join(plan.extended)} alive until then")
    note = "; ".join(parts) + f" (for {reader.op_type} {reader.name!r})"
    extra: dict[str, Any] = {}
    if plan.replaces is not None:
        note += (f"; replaces its {plan.replaces.codec} encoding (payload ~{plan.replaces.payload_bytes} "
                 "bytes no longer held)")
        extra = {"replaced_encoding": plan.replaces.codec, "replaced_payload_bytes": plan.replaces.payload_bytes}
    return {
        "tensor": plan.stash.name, "pattern": plan.stash.pattern, "encoding": "recompute", "codec": None,
        "shape": list(plan.stash.shape) if plan.stash.shape else None,
        "original_bytes": plan.stash.nbytes, "predicted_bytes": 0, "cloned_ops": cloned_ops,
        "inputs_kept": kept, "inputs_extended": plan.extended, "reused": sorted(plan.reused),
        "recomputed_as": source.name,
        "consumer": reader.name, "note": note, **extra,
    }


def _drop_encoding(rw: _Rewrite, enc: _Encoded) -> None:
    """Remove an encoder, its forward anchor views (their readers read the tensor itself again), its
    decoder and the decoder's trigger chain."""
    encoder, decoder = rw.nodes[enc.encoder], rw.nodes[enc.decoder]
    views = [u.node for u in encoder.outputs[contract.ENCODER_ANCHOR].uses()
             if u.node.op_type == "Reshape" and u.idx == 1]
    for view in views:
        view.outputs[0].replace_all_uses_with(view.inputs[0])
    trigger = decoder.inputs[contract.DECODER_TRIGGER]
    rw.graph.remove([encoder, decoder, *views], safe=True)
    # The trigger chain (Slice(Reshape(dY))) feeding only this decoder.
    stack = [trigger]
    while stack:
        value = stack.pop()
        node = value.producer() if value is not None else None
        if node is None or node.graph is not rw.graph or node.op_type not in ("Slice", "Reshape") or value.uses():
            continue
        stack.append(node.inputs[0])
        rw.graph.remove(node, safe=True)


def _drop_unread_optional_outputs(graph: ir.Graph) -> None:
    """Leave out optional outputs nothing reads any more (a forward MaxPool's indices once MaxPoolGrad
    reads its clone's). ORT holds an output nobody consumes until the step ends: VGG-16's five MaxPools'
    indices kept 31 MiB alive that the planner, rightly, counted as free."""
    for node in graph:
        for k, value in enumerate(node.outputs):
            if value.name and _optional_indices(node, k) and not value.uses() and not value.is_graph_output():
                value.name = ""      # an unnamed output is not written (trailing) or written as absent


def _viewed(value: ir.Value | None, alias: dict[str, str]) -> ir.Value | None:
    """``value``, or the tensor an encoding's anchored view of it views (``alias``: view -> tensor)."""
    while value is not None and value.name in alias:
        value = value.producer().inputs[0]
    return value


def _input_named(node: ir.Node, name: str) -> ir.Value:
    return next(v for v in node.inputs if v is not None and v.name == name)


def _output_named(node: ir.Node, name: str) -> ir.Value:
    return next(v for v in node.outputs if v.name == name)


def replace_input(node: ir.Node, old: ir.Value, new: ir.Value) -> None:
    """Make ``node`` read ``new`` wherever it reads ``old``."""
    for k, v in enumerate(node.inputs):
        if v is old:
            node.replace_input_with(k, new)
