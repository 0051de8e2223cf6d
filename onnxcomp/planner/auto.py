"""`--policy auto --budget SIZE [--exact]`: choose, per stash and per backward region, how to hold it so the
training step's predicted peak fits a budget at the least predicted step time.

Pipeline (everything here plans; the rewrites are the existing passes, applied once per trial):

1. Base graph: the free, exact scheduling (deferred weight gradients, eager accumulation) applied, and its
   bytes live per node predicted (planner/predict.py).
2. Options per stash, enumerated from the analysis and the pass registry, never from op-name lists here:
   every ``EncodeStashPass`` subclass whose ``applies`` accepts the stash (so an encoding another pass adds
   to ``StashedTensor.encodings`` shows up without a planner change), in the variants of ``VARIANTS``
   (DPR formats, zfp rates), sized by the pass's own ``select`` (its predicted payload); recomputation where
   ``RecomputePass`` can rebuild the stash. Each option has the bytes it holds between the two uses, its
   predicted seconds (cost model) and whether it is exact (bit-identical training).
3. Search on a *virtual* live curve (no rewrite): an option on a stash lowers the live bytes between the
   stash's last forward use and its first backward use by the bytes it saves. Greedily, at the predicted
   peak, the stash option with the fewest seconds per byte saved is taken, from the lowest lossiness tier
   that still has one (exact techniques before lossy ones; ``exact`` allows only exact ones), until the
   virtual peak fits.
4. Verify: the chosen options are applied through the passes in one pipeline (per-tensor selection:
   ``EncodeStashPass.only``, ``RecomputePass(tensors=)``) and the rewritten graph's peak predicted. Where
   the virtual curve was optimistic, the target is lowered by the difference and the search resumes from
   the current choice; where the peak sits in a backward region no per-stash option reaches (the first
   layer's backward, a large fully connected weight gradient), the region technique for it is enabled
   (batch-chunked backward regions: lossy only, exact only up to float rounding; split weights: with --exact
   on MLAS's reduction grid, bit-identical, passes/exact_gemm.py).
5. Fail loudly: a budget the best reachable plan misses raises ``BudgetError`` naming that peak and the
   tensors live at it.
"""
from __future__ import annotations

import inspect as _inspect
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from ..analysis import GraphAnalysis, StashedTensor
from ..analysis.patterns import LOSSLESS
from ..errors import OnnxcompError
from ..passes.base import OnnxcompPass, RunLog, run_passes
from ..passes.records import PassRecord
from . import memo
from .option_workspace import workspace_bytes

MiB = 1 << 20
# Planned to a little under the budget: measured peaks came out up to 3.3 % above the prediction (ResNet-18's
# tightest lossy plan: predicted 19.14, measured 19.78 MiB; PyOp bridge copies the planner does not see).
DEFAULT_MARGIN = 0.05
# ... and by a fixed amount on small nets (squeezenet_s, exact plan: predicted 6.2, measured 6.9 MiB), at most
# a quarter of the budget: below the 128 KiB mmap threshold every tensor lives on glibc's heap, whose slack
# varies by ~0.5 MiB between runs of one plan (a 16x64x64 net's lossy plan: 2.0-2.5 MiB measured against 2.05
# predicted; with a tenth, 2-MiB budgets were met in some runs only).
MARGIN_BYTES = 1 << 20
MARGIN_SHARE = 0.25


def planning_target(budget: int, margin: float = DEFAULT_MARGIN) -> int:
    """What a plan must predict to be accepted for ``budget``."""
    return int(budget * (1 - margin)) - min(MARGIN_BYTES, int(budget * MARGIN_SHARE))


def tightest_budget_for(predicted_peak: int, margin: float = DEFAULT_MARGIN) -> int:
    """The smallest budget whose planning target a plan predicting ``predicted_peak`` meets (about)."""
    b = int((predicted_peak + MARGIN_BYTES) / (1 - margin)) + 1
    return min(b, int(predicted_peak / (1 - margin - MARGIN_SHARE)) + 1)
# Lossy encoding variants (constructor keywords) tried per pass class; a class not listed is tried as built
# with no keywords. fp16 beside bf16 would be the same size, less precise: bf16 is not offered.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "DprPass": [{"dpr_format": "fp16"}, {"dpr_format": "fp10"}, {"dpr_format": "fp8"}],
    # zfp-6 / zfp-4: the last resort where the budget demands it (each is a tier of its own, taken only
    # where every gentler option at the peak is spent).
    "FixedRatePass": [{"rate": 12}, {"rate": 8}, {"rate": 6}, {"rate": 4}],
    # sz's size depends on the data and on the bound the controller sets: a plan holds it to the size the pass
    # predicts (a sample encoded at the starting bound, with headroom), the encoder loosening eb to stay within.
    "ErrorBoundedPass": [{"cap_payload": True}],
}
# Lossiness tiers of lossy techniques (0 is exact): the greedy search spends a tier before the next.
# sz runs under the adaptive controller (bounded error on the weight gradient, COMET); fp16 and zfp-12
# lose less than 1e-4 relative; fp10 / fp8 / zfp-8 are the aggressive ones, zfp-6 / zfp-4 the last resort.
_TIERS = {"dpr-fp16": 1, "zfp-12": 1, "error_bounded": 1, "dpr-fp10": 2, "zfp-8": 2, "dpr-fp8": 3, "zfp-6": 4,
          "zfp-4": 5}
DEFAULT_TIER = 2
MAX_ROUNDS = 8
RECOMPUTE_CONV = "recompute-conv"
# A recomputation may keep forward tensors alive for its clones up to this fraction of the stash's bytes
# (a dense block's concatenation rebuilt from the stash it extends and its new features: passes/recompute.py).
EXTEND_FRACTION = 0.5
# Local-search passes over the greedy's start where it misses the target (greedy_restarts).
RESTART_PASSES = 4


class BudgetError(OnnxcompError):
    """The budget cannot be met by any plan the planner reaches (exit code 2 at the command line).
    ``predicted_peak`` / ``target``: the best reachable plan's predicted peak and what it had to predict
    (bytes; None where unknown), e.g. for `maxbatch` to aim its next probe."""

    def __init__(self, message: str, *, options: tuple[str, ...] = (), predicted_peak: int | None = None,
                 target: int | None = None) -> None:
        super().__init__(message, options=options)
        self.predicted_peak, self.target = predicted_peak, target


# ----------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class Option:
    """One way to hold one stash: bytes held between its two uses, predicted seconds, exactness."""
    stash: str
    technique: str          # "recompute", "signbits", "sparse", "dpr-fp16", "zfp-8", "error_bounded", ...
    exact: bool
    nbytes: int             # the stash's own bytes
    held: int               # bytes held from its last forward use to its first backward use
    seconds: float
    why: str
    rebuilds: tuple[str, ...] = ()   # recomputation: the forward tensors its clones rebuild
    leaves: tuple[str, ...] = ()     # recomputation: stashes its clones read, held raw from its reader on
    relieves: str = ""               # the tensor whose lifetime it shortens, when not the stash itself (the
                                     # Clip input an interval mask is taken from; "" = the stash)
    workspace: tuple[int, int] = (0, 0)   # bytes its encoder / decoder hold while they run (option_workspace)
    native: bool = True                   # runs as ORT ops only (recomputation, native fp16 / bits / MaxPool
                                          # decoders); False: a codec PyOp (the bridge's copies, Python objects)

    @property
    def saved(self) -> int:
        return self.nbytes - self.held

    @property
    def tier(self) -> int:
        return 0 if self.exact else _TIERS.get(self.technique, DEFAULT_TIER)


@dataclass(frozen=True)
class Technique:
    """An encoding pass in one variant: builds the pass restricted to chosen stashes."""
    name: str
    cls: type
    kwargs: dict[str, Any]
    exact: bool

    def build(self, names: set[str] | None = None, min_bytes: int | None = None, **extra: Any) -> Any:
        kwargs = dict(self.kwargs, **extra)
        if min_bytes is not None and "min_bytes" in _inspect.signature(self.cls).parameters:
            kwargs["min_bytes"] = min_bytes
        p = self.cls(**kwargs)
        p.only = None if names is None else set(names)
        return p


def _subclasses(cls: type) -> list[type]:
    out: list[type] = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return list(dict.fromkeys(out))


def encoding_techniques() -> list[Technique]:
    """Every concrete encoding pass in the registry, in each variant (imports the passes package)."""
    from .. import passes  # noqa: F401  (registers every pass module)
    from ..passes.encode_stash import EncodeStashPass

    out = []
    for cls in _subclasses(EncodeStashPass):
        if _inspect.isabstract(cls) or not isinstance(getattr(cls, "encoding", None), str):
            continue
        exact = bool(getattr(cls, "exact", cls.encoding in LOSSLESS))
        for kw in VARIANTS.get(cls.__name__, [{}]):
            out.append(Technique(_technique_name(cls, kw), cls, kw, exact))
    return out


def _technique_name(cls: type, kw: dict[str, Any]) -> str:
    if "dpr_format" in kw:
        return f"dpr-{kw['dpr_format']}"
    if "rate" in kw:
        return f"zfp-{kw['rate']}"
    return cls.name


class _Costs:
    """Seconds of codecs and recomputed ops: the measured cost model (planner/cost_model.py: the user's
    `onnxcomp calibrate`, else its shipped defaults); rough throughput guesses only if it cannot load."""

    _FALLBACK_MBPS = {"relumask": 400.0, "signbits": 400.0, "maxpool_index": 200.0, "bitmask": 400.0,
                      "sparse": 150.0, "dpr_fp16": 1500.0, "dpr_bf16": 300.0, "dpr_fp10": 150.0,
                      "dpr_fp8": 200.0, "sz": 60.0, "zfp": 25.0}
    _OP_BYTES_PER_S = 2.0e9
    _FLOPS = 10.0e9

    def __init__(self) -> None:
        self.model: Any = None
        try:
            import warnings

            from .cost_model import CostModel

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.model = CostModel.load()
        except Exception:  # noqa: BLE001  (no loadable model: the guesses below)
            self.model = None

    @property
    def source(self) -> str:
        return f"cost model: {self.model.source}" if self.model is not None else "throughput guesses (no cost model)"

    def codec(self, codec: str, nbytes: int, nonzero_ratio: float = 0.5) -> float:
        if self.model is not None:
            return float(self.model.codec_seconds(codec, "encode", nbytes, nonzero_ratio)
                         + self.model.codec_seconds(codec, "decode", nbytes, nonzero_ratio))
        return nbytes / (self._FALLBACK_MBPS.get(codec, 100.0) * 1e6)

    def ops(self, analysis: GraphAnalysis, nodes: list[onnx.NodeProto]) -> float:
        """Seconds to run ``nodes`` once more (the cost model's op fits, by bytes moved and MACs)."""
        # Only the values these nodes touch (called once per option while planning: not the whole graph's).
        touched = {v: analysis.tensors[v] for n in nodes for v in (*n.input, *n.output) if v in analysis.tensors}
        shapes = {v: t.shape for v, t in touched.items()}
        # dtypes: a Cast is priced by its type pair (cost_model.op_kind), as calibrated
        dtypes = {v: str(t.type.dtype) for v, t in touched.items()}
        total = 0.0
        for n in nodes:
            out_b = sum(analysis.tensors[o].nbytes for o in n.output if o in analysis.tensors)
            in_b = sum(analysis.tensors[i].nbytes for i in n.input if i in analysis.tensors)
            if self.model is not None:
                from .cost_model import node_macs, op_kind

                total += float(self.model.op_seconds(n, out_b, macs=node_macs(n, shapes), in_bytes=in_b,
                                                     kind=op_kind(n, dtypes)))
                continue
            w = analysis.tensors.get(n.input[1]) if n.op_type == "Conv" and len(n.input) > 1 else None
            out = analysis.tensors.get(n.output[0]) if n.output else None
            if w is not None and w.shape is not None and out is not None and out.shape is not None:
                total += 2.0 * int(np.prod(w.shape[1:])) * int(np.prod(out.shape)) / self._FLOPS
            else:
                total += (out_b + in_b) / self._OP_BYTES_PER_S
        return total

    def step(self, model: onnx.ModelProto) -> float | None:
        """Predicted seconds of one training step of ``model`` (None without a cost model)."""
        if self.model is None:
            return None
        from .cost_model import predict_step

        try:
            return float(predict_step(model, self.model).total)
        except Exception:  # noqa: BLE001  (a graph the step model cannot read: no figure, no failure)
            return None


def _cloned_nodes(analysis: GraphAnalysis, stash: StashedTensor, ops: list[str]) -> list[onnx.NodeProto]:
    """The forward nodes a recomputation of ``stash`` clones (its producer and the chain above it whose op
    types the recompute record lists)."""
    graph = analysis.model.graph
    left = list(ops)
    out: list[onnx.NodeProto] = []
    frontier = [stash.producer] if stash.producer is not None else []
    while frontier and left:
        idx = frontier.pop(0)
        node = graph.node[idx]
        if node.op_type not in left:
            continue
        left.remove(node.op_type)
        out.append(node)
        for i in node.input:
            t = analysis.tensors.get(i)
            if t is not None and t.producer is not None:
                frontier.append(t.producer)
    return out


def enumerate_options(analysis: GraphAnalysis, techniques: list[Technique],
                      recomputable: dict[str, dict[str, tuple[list[str], list[str], list[str]]]],
                      costs: _Costs, exact_only: bool, min_bytes: int,
                      windows: dict[str, "_Window"] | None = None) -> dict[str, list[Option]]:
    """Per stash, every option the passes accept, cheapest per byte saved first within its tier."""
    graph = analysis.model.graph
    built = [(t, t.build(min_bytes=min_bytes)) for t in techniques if t.exact or not exact_only]
    out: dict[str, list[Option]] = {}
    for stash in analysis.stashed:
        if stash.nbytes <= 0:
            continue
        opts: list[Option] = []
        for technique, table in recomputable.items():
            if stash.name in table:
                ops, kept, extended = table[stash.name]
                nodes = _cloned_nodes(analysis, stash, ops)
                secs = costs.ops(analysis, nodes)
                # Forward tensors kept alive for the clones (a Concat's new piece) are held in its place.
                held = sum(analysis.tensors[e].nbytes for e in extended if e in analysis.tensors)
                if held >= stash.nbytes:
                    break
                opts.append(Option(stash.name, technique, True, stash.nbytes, held, secs,
                                   f"rebuilt in backward by {len(ops)} cloned op(s) ({', '.join(ops)})"
                                   + (f", keeping {', '.join(extended)} alive" if extended else ""),
                                   tuple(o for n in nodes for o in n.output if o), tuple(kept)))
                break
        for tech, p in built:
            if not p.applies(stash):
                continue
            try:
                enc = p.select(analysis, stash)
            except Exception as exc:  # noqa: BLE001  (a pass that cannot size it: not an option)
                enc = f"cannot be sized: {exc}"
            if isinstance(enc, str):
                continue
            held = sum(b if b is not None else stash.nbytes // 2 for b in enc.payload_bytes)
            if enc.readers is not None:   # encodes for some readers only: the stash itself stays
                continue
            own = (windows or {}).get(stash.name)
            relieves, nbytes = "", stash.nbytes
            if enc.target != stash.name and (own is None or own.held_from >= own.held_to) \
                    and enc.target in analysis.tensors:
                # The stash is made late from a tensor the encoder takes early (Clip's mask from its input):
                # what it saves is that tensor's life until backward.
                relieves, nbytes = enc.target, analysis.tensors[enc.target].nbytes
            if held >= nbytes:
                continue
            secs = costs.codec(enc.codec, nbytes)
            opts.append(Option(stash.name, tech.name, tech.exact, nbytes, held, secs,
                               f"{tech.name}: {enc.note or enc.codec}", relieves=relieves,
                               workspace=workspace_bytes(enc.codec, enc.params, nbytes, enc.native),
                               native=enc.native is not None))
        if opts:
            out[stash.name] = opts
    return out


# ----------------------------------------------------------------------------------------- virtual curve
@dataclass
class _Window:
    """Where an option on a stash changes the live curve: node indices [held_from, held_to) of the base
    graph, between its last forward use and its first backward use."""
    start: int
    held_from: int
    held_to: int


def stash_windows(analysis: GraphAnalysis, extra: set[str] = frozenset()) -> dict[str, _Window]:
    """Windows of every stash, and of the ``extra`` tensors (forward tensors an option relieves: read early
    in forward, and late — by ops that sit in the backward part of the node list)."""
    fb = analysis.boundary.first_backward
    # Consumers of a buffer include those of its views (Reshape/Flatten of the stash, encoder anchors).
    views: dict[str, list[str]] = {}
    for name, t in analysis.tensors.items():
        if t.alias_of is not None:
            views.setdefault(t.alias_of, []).append(name)
    out = {}
    late_of = {s.name: list(s.backward_consumers) for s in analysis.stashed}
    for name in [*late_of, *sorted(extra)]:
        t = analysis.tensors.get(name)
        if t is None or t.producer is None:
            continue
        group, frontier = [name], [name]
        while frontier:
            for v in views.get(frontier.pop(), []):
                group.append(v)
                frontier.append(v)
        consumers = [c for g in group for c in analysis.tensors[g].consumers]
        fwd = [c for c in consumers if c < fb and not analysis.boundary.is_backward(c)]
        late = late_of.get(name) or [c for c in consumers if c >= fb]
        if not late:
            continue
        out[name] = _Window(t.producer, max(fwd, default=t.producer) + 1, min(late))
    return out


def virtual_live(base_live: np.ndarray, windows: dict[str, _Window], chosen: dict[str, Option]) -> np.ndarray:
    """The base curve with each chosen option's saving taken off its stash's window (payload added while
    both the stash and its payload exist)."""
    live = base_live.astype(np.int64).copy()
    # A stash a recomputation reads is needed whole from that recomputation's reader on.
    needed_from: dict[str, int] = {}
    for name, opt in chosen.items():
        w = windows.get(name)
        for leaf in opt.leaves if w is not None else ():
            needed_from[leaf] = min(needed_from.get(leaf, w.held_to), w.held_to)
    for name, opt in chosen.items():
        w = windows.get(opt.relieves or name)
        if w is None:
            continue
        live[w.held_from:min(w.held_to, needed_from.get(name, w.held_to))] -= opt.saved
        if opt.held:
            live[w.start + 1:w.held_from] += opt.held
        # The codec ops' own memory: the encoder runs right after the producer, the decoder right before
        # the first backward reader.
        live[_encoder_at(w)] += opt.workspace[0]
        if w.held_to < len(live):
            live[w.held_to] += opt.workspace[1]
    return live


def _encoder_at(w: _Window) -> int:
    """The base node whose live bytes an encoder's workspace joins: the one after the producer (the encoder
    runs once the producer's inputs may be freed; at the producer itself they still count)."""
    return max(w.start, min(w.start + 1, w.held_from - 1))


def _at(o: Option | None, w: _Window, p: int) -> int:
    """What option ``o`` (None: the stash held raw) adds to the virtual live bytes at node ``p``."""
    if o is None:
        return 0
    c = -o.saved if w.held_from <= p < w.held_to else 0
    if w.start < p < w.held_from:
        c += o.held
    return c + (o.workspace[0] if p == _encoder_at(w) else 0) + (o.workspace[1] if p == w.held_to else 0)


def _lowers_peak(live: np.ndarray, windows: dict[str, _Window], name: str, cur: Option | None,
                 new: Option | None, peak: int) -> bool:
    """Does replacing ``cur`` by ``new`` on stash ``name`` keep every node it touches below ``peak``? (A codec's
    workspace, or giving a stash back its raw bytes, can raise nodes away from the peak above it.)"""
    spans = [(o, windows[o.relieves or name]) for o in (cur, new) if o is not None]
    lo = min(w.start for _, w in spans)
    hi = min(max(w.held_to for _, w in spans) + 1, len(live))
    part = live[lo:hi].astype(np.int64).copy()
    for o, w in spans:
        sign = -1 if o is cur else 1
        part[w.held_from - lo:w.held_to - lo] -= sign * o.saved
        part[w.start + 1 - lo:w.held_from - lo] += sign * o.held
        part[_encoder_at(w) - lo] += sign * o.workspace[0]
        if w.held_to < hi:
            part[w.held_to - lo] += sign * o.workspace[1]
    return int(part.max()) < peak


def _spike(o: Option | None, w: _Window, p: int) -> bool:
    """Is node ``p`` where option ``o``'s codec ops hold their workspace?"""
    return o is not None and ((p == _encoder_at(w) and o.workspace[0] > 0) or (p == w.held_to and o.workspace[1] > 0))


def greedy(base_live: np.ndarray, windows: dict[str, _Window], options: dict[str, list[Option]],
           chosen: dict[str, Option], target: int, ignore: np.ndarray | None = None,
           banned: set[tuple[str, str]] | None = None) -> tuple[dict[str, Option], int]:
    """Upgrade stashes live at the virtual peak, cheapest seconds per extra byte first within the lowest
    tier available there, until the virtual peak is ≤ target or nothing at the peak can be upgraded.
    ``ignore``: base nodes whose bytes a region technique decides (left to the real prediction).
    ``banned``: (stash, technique) pairs not to take; grows when a recomputation is given up because the
    stashes it pins (reads whole) are what is left at the peak."""
    chosen = dict(chosen)
    banned = set() if banned is None else banned
    lowest: tuple[int, dict[str, Option]] | None = None   # giving up pinning recomputations can end higher
    while True:
        live = virtual_live(base_live, windows, chosen)
        if ignore is not None and ignore.any():
            live[ignore] = 0
        p = int(np.argmax(live))
        if live[p] <= target:
            return chosen, int(live[p])
        if lowest is None or live[p] < lowest[0]:
            lowest = (int(live[p]), dict(chosen))
        # A stash some chosen recomputation reads (its leaf) stays whole: no option of its own; choosing a
        # recomputation gives up whatever its leaves' options saved.
        pinned = {leaf for o in chosen.values() for leaf in o.leaves}
        best: tuple[tuple[int, float], Option, bool] | None = None   # key, option, drop it
        pinned_here = set()
        for name, opts in options.items():
            cur = chosen.get(name)
            # At the workspace spike of the stash's current codec, any other option (or none) may lower it.
            spike = cur is not None and (cw := windows.get(cur.relieves or name)) is not None and _spike(cur, cw, p)
            opts = [o for o in opts if (name, o.technique) not in banned
                    and (w := windows.get(o.relieves or name)) is not None
                    and (w.held_from <= p < w.held_to or spike)]
            if not opts and not spike:
                continue
            if name in pinned:
                pinned_here.add(name)
                continue
            cur_secs, cur_tier = (cur.seconds, cur.tier) if cur else (0.0, 0)
            for o in [*opts, *([None] if spike else [])]:
                lost = [chosen[leaf] for leaf in (o.leaves if o else ()) if leaf in chosen]
                gain = (_at(cur, windows[(cur or o).relieves or name], p)
                        - _at(o, windows[(o or cur).relieves or name], p) - sum(x.saved for x in lost))
                if gain <= 0 or (not spike and o is not None and o.tier < cur_tier) \
                        or not _lowers_peak(live, windows, name, cur, o, int(live[p])):
                    continue
                key = (o.tier if o else 0, max((o.seconds if o else 0.0) - cur_secs
                                               - sum(x.seconds for x in lost), 0.0) / gain)
                if best is None or key < best[0]:
                    best = (key, o if o else cur, o is None)
        if best is None:
            pinning = [o for o in chosen.values() if set(o.leaves) & pinned_here]
            if not pinning:
                return (lowest[1], lowest[0]) if lowest[0] < live[p] else (chosen, int(live[p]))
            for o in pinning:
                banned.add((o.stash, o.technique))
                chosen.pop(o.stash)
            continue
        _, o, drop = best
        if drop:
            chosen.pop(o.stash)
            continue
        for leaf in o.leaves:
            chosen.pop(leaf, None)
        chosen[o.stash] = o


def _seeded(chosen: dict[str, Option], o: Option) -> dict[str, Option]:
    """``chosen`` with ``o`` forced in: the stashes it reads whole lose their options, and recomputations that
    read ``o``'s stash whole are dropped (it is no longer whole)."""
    seed = {k: x for k, x in chosen.items() if k not in o.leaves and o.stash not in x.leaves}
    seed[o.stash] = o
    return seed


def greedy_restarts(base_live: np.ndarray, windows: dict[str, _Window], options: dict[str, list[Option]],
                    chosen: dict[str, Option], target: int, ignore: np.ndarray | None = None,
                    banned: set[tuple[str, str]] | None = None, max_passes: int = RESTART_PASSES
                    ) -> tuple[dict[str, Option], int]:
    """``greedy``, then, where it misses ``target``, a local search over its start: each option not in its
    choice (no lossier tier than the choice's, not banned) is forced in and the greedy run again from there;
    the lowest virtual peak is kept (at or under the target: the fewest seconds) and searched from again,
    up to ``max_passes`` times or until nothing is lower.

    Why: the greedy is not monotone in its choices. A cheap recomputation taken first pins the stash it reads
    whole, and the option that would have freed that stash is never reached (leaky_vgg --exact: a LeakyRelu
    output rebuilt from its conv output pins that 6 MiB conv output; greedy floor 30.6 MiB virtual, 24.8 MiB
    from the restart that rebuilds the stem's LeakyRelu output first). ``banned`` is read, not grown: what a
    greedy run bans on its own (recomputations pinning a stash at its stuck peak) holds for that run only, so
    a later round at a lower target searches every start again (leaky_vgg at 28.1 MiB: 26.4 MiB predicted
    with the bans carried over, 24.5 without)."""
    banned = set() if banned is None else banned
    trial_banned = set(banned)
    best, peak = greedy(base_live, windows, options, chosen, target, ignore, trial_banned)
    best_banned = trial_banned
    seconds = lambda c: sum(x.seconds for x in c.values())  # noqa: E731
    if peak > target and chosen:
        # Continued from an earlier round's choice (a lower target after the real prediction): the search from
        # an empty start may end lower.
        fresh_banned = set(banned)
        fresh, low = greedy(base_live, windows, options, {}, target, ignore, fresh_banned)
        if (max(low - target, 0), seconds(fresh)) < (max(peak - target, 0), seconds(best)):
            best, peak, best_banned = fresh, low, fresh_banned
    for _ in range(max_passes if peak > target else 0):
        tier = max((x.tier for x in best.values()), default=0)
        found: tuple[tuple[int, float], dict[str, Option], set[tuple[str, str]]] | None = None
        for name, opts in options.items():
            for o in opts:
                if best.get(name) is o or (name, o.technique) in banned or o.tier > tier:
                    continue
                trial_banned = set(banned)
                c, v = greedy(base_live, windows, options, _seeded(best, o), target, ignore, trial_banned)
                key = (max(v - target, 0), seconds(c))
                if key < (max(peak - target, 0), seconds(best)) and (found is None or key < found[0]):
                    found = (key, c, trial_banned)
        if found is None:
            break
        _, best, best_banned = found
        live = virtual_live(base_live, windows, best)
        if ignore is not None and ignore.any():
            live[ignore] = 0
        peak = int(live.max())
        if peak <= target:
            break
    return best, peak


# ------------------------------------------------------------------------------------------- application
@dataclass
class Regions:
    """Backward-region techniques enabled (lossy: exact up to float rounding)."""
    chunked: bool = False
    split_weight_bytes: int | None = None
    split_bit_identical: bool = False        # --exact: blocks on MLAS's reduction grid (passes/exact_gemm.py)
    joint_recompute: bool = False            # size recomputations as one joint rewrite makes them (_recomputable)
    extend: bool = True                      # recomputations may keep forward tensors alive (EXTEND_FRACTION)
                                             # and be rebuilt through recomputable stashes (_deepen)
    rows: Any = None                         # auto_rows.RowsChoice: conv chains row-split first (lossy only)
    # Lossy only (rounding): the block reading the graph input run in batch chunks, forward and backward
    # (passes/chunk_input_block.py; 0 = off), and conv weights held as output-channel blocks
    # (passes/split_conv_weight.py).
    input_block_chunks: int = 0
    split_conv_bytes: int | None = None
    # With input_block_chunks: how many layers from the input run chunked (passes/chunk_input_chain.py);
    # 0 = the one input block of chunk_input_block.
    input_chain_layers: int = 0
    # Lossy only: ConvGrads whose im2col workspace is above this run as input-channel blocks
    # (passes/split_conv_grad.py): batch chunks do not shrink that one-image buffer.
    split_conv_grad_bytes: int | None = None
    # Lossy only (rounding): 1x1 conv + non-overlapping average pool run as pool then conv, so the conv's
    # weight gradient reads the pooled input (passes/commute_pool.py; DenseNet transitions). Not enabled by
    # plan_auto (measured no gain on densenet_s).
    commute_pools: bool = False
    # Transformer graphs (LayerNorm / Softmax gradients present): the exact transformer passes of the fixed
    # policies (passes/transformer.py: early weight gradients, LayerNorm / GELU / linear / attention-probability
    # recomputation, dropout masks as bits) run after the planned recomputations; tried only where a plan
    # without them misses its budget (they cost recomputation time).
    transformer: bool = False
    # False: only options that run as ORT ops (no codec PyOp). Under ORT's default session settings each codec
    # PyOp costs heap beyond its payload — the bridge's copy of its inputs, its NumPy result and temporaries while
    # it runs (planner/ort_growth.heap_peak) plus ~30 KB of small blocks (heap_term) — which can outweigh what
    # its payload saves against a native encoding: the growth mode (planner/growth_budget.py) prices plans both ways.
    pyops: bool = True

    def first_key(self) -> tuple[Any, ...]:
        """What ``first_passes`` depends on (planner/memo.py keys the base graph by it)."""
        return (self.rows, self.input_block_chunks, self.split_weight_bytes, self.split_bit_identical,
                self.split_conv_bytes, self.input_chain_layers, self.commute_pools, self.split_conv_grad_bytes)

    def first_passes(self) -> list[OnnxcompPass]:
        """The region techniques that rewrite the graph before anything is planned on it."""
        from ..passes import SplitWeightPass
        from ..passes.chunk_input_block import ChunkedInputBlockPass
        from ..passes.split_conv_weight import SplitConvWeightPass

        out: list[OnnxcompPass] = [self.rows.build()] if self.rows is not None else []
        if self.input_block_chunks and self.input_chain_layers:
            from ..passes.chunk_input_chain import ChunkedInputChainPass

            out.append(ChunkedInputChainPass(self.input_block_chunks, self.input_chain_layers))
        elif self.input_block_chunks:
            out.append(ChunkedInputBlockPass(self.input_block_chunks))
        if self.commute_pools:
            # After the row split and the input region (they find their convs on the planner's model, by
            # structure), before weights are split (a split conv no longer matches).
            from ..passes.commute_pool import CommutePoolConvPass

            out.append(CommutePoolConvPass())
        if self.split_conv_grad_bytes:
            # After the input region: its per-chunk ConvGrads are what it splits.
            from ..passes.split_conv_grad import SplitConvGradPass

            out.append(SplitConvGradPass(self.split_conv_grad_bytes))
        if self.split_weight_bytes:
            out.append(SplitWeightPass(self.split_weight_bytes, bit_identical=self.split_bit_identical))
        if self.split_conv_bytes:
            out.append(SplitConvWeightPass(self.split_conv_bytes))
        return out


def build_passes(chosen: dict[str, Option], regions: Regions, techniques: list[Technique],
                 min_bytes: int) -> list[OnnxcompPass]:
    """One pipeline for the whole choice, in the order the fixed policies use: split weights, scheduling,
    recomputation, exact encodings, error-bounded, the chunked first-layer backward, then the other lossy
    formats (the chunked region slices their decodes)."""
    from ..passes import (ChunkedBackwardPass, DeferWeightGradientPass, EagerAccumulationPass, RecomputePass,
                          SignBitsPass)

    by_tech: dict[str, set[str]] = {}
    for o in chosen.values():
        by_tech.setdefault(o.technique, set()).add(o.stash)
    passes: list[OnnxcompPass] = regions.first_passes()
    passes += [DeferWeightGradientPass(), EagerAccumulationPass()]
    rebuilt = by_tech.get("recompute", set()) | by_tech.get(RECOMPUTE_CONV, set())
    if rebuilt:
        from ..passes.recompute import CHEAP_OPS

        ops = CHEAP_OPS | {"Conv"} if by_tech.get(RECOMPUTE_CONV) else CHEAP_OPS
        passes.append(RecomputePass(tensors=sorted(rebuilt), ops=ops,
                                    extend_fraction=EXTEND_FRACTION if regions.extend else 0.0))
    if regions.transformer:
        from ..passes import TRANSFORMER_EXACT

        from ..passes.policy import step

        passes += [s(**({"min_bytes": min_bytes} if "min_bytes" in s.takes() else {}))
                   for s in map(step, TRANSFORMER_EXACT)]
    lossy_names = {o.stash for o in chosen.values() if not o.exact}
    if lossy_names:
        # A lossy copy could flip a tiny positive to zero and change ReluGrad's mask: ReluGrad readers of
        # a lossily held stash get their own sign bits first (as the fixed lossy policies do).
        split = SignBitsPass(split_readers=True)
        split.only = set(lossy_names)
        passes.append(split)
    exact = [t for t in techniques if t.exact]
    lossy = [t for t in techniques if not t.exact]
    for t in exact:
        if by_tech.get(t.name):
            passes.append(t.build(by_tech[t.name], min_bytes=min_bytes))
    early = [t for t in lossy if t.name == "error_bounded"]
    late = [t for t in lossy if t.name != "error_bounded"]
    for t in early:
        if by_tech.get(t.name):
            passes.append(t.build(by_tech[t.name], min_bytes=min_bytes))
    if regions.chunked:
        if regions.rows is not None:
            from .auto_rows import ChunkedOutsideRowBlocks as ChunkedBackwardPass  # noqa: N814
        passes.append(ChunkedBackwardPass())
    for t in late:
        if by_tech.get(t.name):
            passes.append(t.build(by_tech[t.name], min_bytes=min_bytes))
    # Transformers: attention in head/batch chunks, exact; last (passes/chunk_attention.py); then the large
    # Dropout draws at the step's start (passes/hoist_dropout.py, needs the masks as bits). No-op elsewhere.
    from ..passes import (ChunkedAttentionBackwardPass, ChunkedAttentionForwardPass, HoistDropoutDrawsPass,
                          MaskGradPass)
    passes += [ChunkedAttentionBackwardPass(min_bytes=min_bytes), ChunkedAttentionForwardPass(min_bytes=min_bytes),
               HoistDropoutDrawsPass()]
    if regions.transformer and lossy_names:
        # As the fixed lossy policies: each MLP's backward in batch chunks (weight gradients summed over the
        # chunks: rounding only, so never in an exact plan; passes/chunk_mlp.py).
        from ..passes import ChunkedMlpBackwardPass

        passes.append(ChunkedMlpBackwardPass())
    # A lossy plan, like the fixed lossy policies: ReluGrad on a sign mask as Mul (passes/mask_grad.py: same
    # values, a masked zero's sign may differ), so never in an exact plan.
    return passes + [MaskGradPass()] if lossy_names else passes


@dataclass
class Applied:
    """A pipeline run on a copy: the rewritten onnx-ir model, its snapshot, and the run's records."""
    ir_model: Any
    model: onnx.ModelProto
    log: RunLog


def apply(model: onnx.ModelProto, passes: list[OnnxcompPass]) -> Applied:
    """``passes`` run on a copy of ``model``, loaded into onnx-ir once and composed by ``run_passes`` (whether
    a pass is ported to onnx-ir or still behind the adapter). ``model`` is untouched."""
    import onnx_ir as ir

    from ..analysis.cached import adopt_snapshot, snapshot_of

    loaded = ir.serde.deserialize_model(model)
    adopt_snapshot(loaded, model, checked=True)
    log = run_passes(loaded, passes)
    return Applied(loaded, snapshot_of(loaded), log)


def _evaluate(model: onnx.ModelProto, chosen: dict[str, Option], regions: Regions, techniques: list[Technique],
              min_bytes: int) -> tuple[Applied, onnx.ModelProto, np.ndarray]:
    """A choice applied and predicted (both orders): once per distinct choice in a planning session (the
    searches with and without workspace, alone or joint recomputation, often reach the same one). The
    pipeline depends on each option's stash and technique and on the regions (extension included), nothing else."""
    def run() -> tuple[Applied, onnx.ModelProto, np.ndarray]:
        applied = apply(model, build_passes(chosen, regions, techniques, min_bytes))
        return (applied, *predicted_live_both_orders(applied.model))

    key = (id(model), min_bytes, tuple(t.name for t in techniques), regions.first_key(), regions.chunked,
           regions.extend, regions.transformer, frozenset((o.stash, o.technique) for o in chosen.values()))
    applied, seen, live = memo.cached("auto.evaluate", key, run, model)
    return applied, seen, live.copy()


# ------------------------------------------------------------------------------------------------ search
@dataclass
class AutoPlan:
    budget: int
    exact: bool
    target: int                              # what the search planned to (budget less the margin)
    chosen: dict[str, Option]
    regions: Regions
    predicted_peak: int
    baseline_peak: int
    fits: bool
    dominant: list[tuple[str, int]]          # largest tensors live at the predicted peak
    rounds: list[dict[str, Any]] = field(default_factory=list)
    model: onnx.ModelProto | None = None
    applied: Applied | None = None           # the run that made ``model`` (AutoPass adopts its graph)
    cost_source: str = ""
    predicted_seconds: float = 0.0
    step_seconds: tuple[float | None, float | None] = (None, None)   # predicted step: baseline, plan
    # --budget-for ort-defaults (planner/growth_budget.py): the growth budget, the plan's predicted growth and its
    # parts, every step-peak target priced; None for a step-peak budget
    growth: dict[str, Any] | None = None
    # The heap term inside ``predicted_peak`` (planner/heap_term.py) and the node count it was priced on.
    heap_bytes: int = 0
    nodes: int = 0

    def decisions(self) -> list[dict[str, Any]]:
        """One record per decision: technique, bytes, predicted seconds, why."""
        out = [{"tensor": o.stash, "technique": o.technique, "exact": o.exact, "original_bytes": o.nbytes,
                "held_bytes": o.held, "saved_bytes": o.saved, "predicted_seconds": round(o.seconds, 6),
                "why": o.why} for o in sorted(self.chosen.values(), key=lambda o: -o.saved)]
        if self.regions.chunked:
            out.append({"region": "backward regions down to the first layer", "technique": "chunked",
                        "exact": False, "why": "the predicted peak sat in a backward region no stash option "
                        "reaches (gradient maps of the first layers); each region is kept only where the "
                        "planner predicts it lowers the peak (passes/chunk_backward.py)"})
        if self.regions.rows is not None:
            out.append(self.regions.rows.record())
        if self.regions.input_block_chunks:
            out.append({"region": "the block reading the graph input", "technique": "chunked_input_block",
                        "exact": False, "chunks": self.regions.input_block_chunks,
                        "why": "its full-resolution tensors (conv and BatchNorm outputs, ReLU mask) set the predicted "
                        "peak; forward and backward run in batch chunks from the input, BatchNorm statistics "
                        "merged over the chunks (passes/chunk_input_block.py)"})
            if self.regions.input_chain_layers:
                out[-1].update(technique="chunked_input_chain", layers=self.regions.input_chain_layers,
                               region=f"the first {self.regions.input_chain_layers} unit(s) (layers, residual "
                                      "blocks) from the graph input",
                               why="their full-resolution forward working sets (conv input and output, "
                               "BatchNorm output) set the predicted peak; the chain runs forward and backward in "
                               "batch chunks from the input, each BatchNorm's statistics merged over the chunks "
                               "(passes/chunk_input_chain.py)")
        if self.regions.split_conv_bytes:
            out.append({"region": "conv weight gradients", "technique": "split_conv_weight", "exact": False,
                        "split_weight_bytes": self.regions.split_conv_bytes,
                        "why": "a conv weight gradient was the largest tensor at the predicted peak "
                        "(passes/split_conv_weight.py)"})
        if self.regions.split_weight_bytes:
            out.append({"region": "fully connected weight gradients", "technique": "split_weight",
                        "exact": self.regions.split_bit_identical,
                        "split_weight_bytes": self.regions.split_weight_bytes,
                        "why": "a weight gradient larger than the budget allows was live at the predicted peak"})
        return out

    def summary(self) -> dict[str, Any]:
        return {"budget_bytes": self.budget, "exact": self.exact, "target_bytes": self.target,
                "baseline_predicted_peak_bytes": self.baseline_peak, "predicted_peak_bytes": self.predicted_peak,
                "predicted_heap_bytes": self.heap_bytes, "nodes": self.nodes,
                "fits": self.fits, "dominant_at_peak": [{"tensor": n, "bytes": b} for n, b in self.dominant],
                "predicted_extra_seconds": round(self.predicted_seconds, 6), "cost_source": self.cost_source,
                "predicted_step_seconds": {"baseline": self.step_seconds[0], "plan": self.step_seconds[1]},
                "rounds": self.rounds, "decisions": self.decisions(),
                **({"ort_defaults": self.growth} if self.growth is not None else {})}

    def failure_line(self) -> str:
        if self.growth is not None:
            from .growth_budget import growth_failure_line

            return growth_failure_line(self)
        parts = [(n, b) for n, b in self.dominant[:3]]
        if self.heap_bytes:
            # The heap term is part of the peak: name it where it outweighs a tensor (a many-node chunked graph).
            parts.append((f"heap pages of {self.nodes:,} nodes' small blocks", self.heap_bytes))
            parts = sorted(parts, key=lambda p: -p[1])[:3]
        top = ", ".join(f"{n} ({b / MiB:.1f} MiB)" for n, b in parts)
        mode = "exact techniques only (--exact)" if self.exact else "every technique"
        return (f"budget {self.budget / MiB:.1f} MiB cannot be met with {mode}: the best reachable predicted "
                f"step peak is {self.predicted_peak / MiB:.1f} MiB (a plan must predict ≤ "
                f"{self.target / MiB:.1f} MiB: the budget less the predictor's margin), dominated by {top}")


def predicted_live(model: onnx.ModelProto, eager_accumulation: bool = True) -> tuple[onnx.ModelProto, np.ndarray]:
    """planner/predict.py's live bytes per node plus what a forward Conv allocates that the graph does not
    show: its im2col buffer ((C_in/group)·kh·kw × H_out·W_out floats; none for a 1×1, stride-1, unpadded
    conv). It matters once convolutions are recomputed in backward, at the step's peak: without it a
    squeezenet_s plan measured 11 % above its prediction."""
    return memo.live_copy(memo.cached("auto.predicted_live", (id(model), eager_accumulation),
                                      lambda: _predicted_live(model, eager_accumulation), model))


def _predicted_live(model: onnx.ModelProto, eager_accumulation: bool) -> tuple[onnx.ModelProto, np.ndarray]:
    from .predict import predicted_live as _live

    seen, live = _live(model, eager_accumulation)
    convs = [i for i, n in enumerate(seen.graph.node) if n.op_type in ("Conv", "ConvTranspose")]
    if convs:
        analysis = memo.analysis(seen)
        for i in convs:
            node = seen.graph.node[i]
            live[i] += (conv_workspace if node.op_type == "Conv" else conv_transpose_workspace)(analysis, node)
    return seen, live


def predicted_live_both_orders(model: onnx.ModelProto) -> tuple[onnx.ModelProto, np.ndarray]:
    """``predicted_live`` of ``model`` as ``transform`` will write it (``DefaultOrderPass`` last), in whichever
    of ORT's two execution orders peaks higher: node-list order (PRIORITY_BASED) or DEFAULT, ORT's own
    default (analysis/execution_order.py). A budget then holds under either setting."""
    return memo.live_copy(memo.cached("auto.both_orders", id(model), lambda: _predicted_live_both_orders(model),
                                      model))


def _predicted_live_both_orders(model: onnx.ModelProto) -> tuple[onnx.ModelProto, np.ndarray]:
    from ..analysis.execution_order import in_run_order
    from ..passes.default_order import DefaultOrderPass

    final = DefaultOrderPass().run(model).model
    seen, live = predicted_live(final)
    seen_d, live_d = predicted_live(in_run_order(final, "default"), eager_accumulation=False)
    if len(live_d) and (not len(live) or live_d.max() > live.max()):
        return seen_d, live_d
    return seen, live


# An upper bound on MLAS's segmented im2col buffer (per-thread 16K floats, two threads here).
SEGMENTED_CONV_WORKSPACE = 128 << 10


def conv_workspace(analysis: GraphAnalysis, node: onnx.NodeProto) -> int:
    """Bytes of ORT's CPU Conv im2col buffer for one image (0 where it needs none or a shape is unknown)."""
    from ..passes.base import node_attr

    w = analysis.tensors.get(node.input[1]) if len(node.input) > 1 else None
    y = analysis.tensors.get(node.output[0])
    if w is None or y is None or w.shape is None or y.shape is None or len(w.shape) < 3:
        return 0
    kernel = tuple(w.shape[2:])
    strides = tuple(node_attr(node, "strides", [1] * len(kernel)))
    pads = tuple(node_attr(node, "pads", [0] * 2 * len(kernel)))
    if all(k == 1 for k in kernel) and all(st == 1 for st in strides) and not any(pads):
        return 0
    full = int(np.prod(w.shape[1:], dtype=np.int64) * np.prod(y.shape[2:], dtype=np.int64)) * 4
    # MLAS expands the whole image (OutputSize x K) only where the filters outnumber the output pixels; else
    # it runs the expansion in segments of a small per-thread buffer (MlasConvPrepare's
    # ExpandThenGemmSegmented). Measured with ORT 1.19.2 (NOTES-widesuite.md): a 64->64 3x3 conv at 40x40
    # (3.5 MiB image expansion) peaked at its output plus < 0.1 MiB, at batch 1, 2 and 4.
    filters = int(w.shape[0]) // max(1, int(node_attr(node, "group", 1)))
    if filters <= int(np.prod(y.shape[2:], dtype=np.int64)):
        return min(full, SEGMENTED_CONV_WORKSPACE)
    return full


def conv_transpose_workspace(analysis: GraphAnalysis, node: onnx.NodeProto) -> int:
    """Bytes of ORT's CPU ConvTranspose col buffer: (C_out/group)·∏kernel × ∏input pixels floats for one image,
    allocated on every call whatever the shapes (conv_transpose.cc). The chunked regions compute input gradients
    with ConvTranspose, where it is far larger than Conv's segmented buffer for the same shapes (3.5 MiB for a
    64-channel 3×3 conv at 40×40): without it a chunked wide_resnet_s plan measured 3.6 MiB above its prediction
    (docs/notes/lossygrowth.md; ort_growth.conv_scratch prices the same request for ORT's arena)."""
    x = analysis.tensors.get(node.input[0]) if node.input else None
    w = analysis.tensors.get(node.input[1]) if len(node.input) > 1 else None
    if x is None or w is None or x.shape is None or w.shape is None or len(w.shape) < 3 or len(x.shape) < 3:
        return 0
    return int(np.prod(w.shape[1:], dtype=np.int64) * np.prod(x.shape[2:], dtype=np.int64)) * 4


def dominant_at_peak(model: onnx.ModelProto, top: int = 3) -> tuple[int, list[tuple[str, int]]]:
    """The predicted peak of ``model`` and the largest buffers live at it."""
    peak, bufs = _peak_buffers(*predicted_live(model))
    return peak, [(b.name, int(b.size)) for b in bufs[:top]]


def _peak_buffers(seen: onnx.ModelProto, live: np.ndarray) -> tuple[int, list[Any]]:
    """The predicted step peak of ``seen`` (its live curve's peak plus its heap term, ``predicted_heap``) and the
    buffers live at the curve's peak, largest first. Every fit decision of the planner (``_plan_auto``'s rounds,
    ``_fewer_chunks``, ``dominant_at_peak``) reads the peak here, so each one counts the heap pages a graph's
    nodes touch: more chunks hold less live data but add nodes."""
    if not len(live):
        return 0, []
    at = int(np.argmax(live))
    bufs = sorted((b for b in memo.analysis(seen).buffers() if b.start <= at <= b.end and b.size > 0),
                  key=lambda b: -b.size)
    return int(live[at]) + predicted_heap(seen), bufs


def predicted_heap(seen: onnx.ModelProto) -> int:
    """The heap term of ``seen``'s predicted step peak (planner/heap_term.py): glibc heap pages its step's small
    blocks touch above the live data, a fitted linear function of its nodes and PyOps (docs/auto/heapterm/).
    Without it, ResNet-18's 12 and 15 MiB plans measured 13.7-30.7 MiB under the trimmed `measure`."""
    from .heap_term import heap_features, heap_term

    return memo.cached("auto.heap", id(seen), lambda: heap_term(heap_features(seen, memo.analysis(seen))), seen)


def written_heap(applied: "Applied") -> int:
    """The heap term of the graph `transform` will write for ``applied``: after its last passes
    (``transform.last_passes``: ReuseSignaturePass's zero-copy views, MaskedFill, EarlyEncode, ...), which add nodes
    the planner's own graph does not have (8-23 % on ResNet-18 and leaky_vgg plans, 93 % on a mobilenet_v1_s plan:
    1,895 planned, 3,666 written, whose 7.9 MiB plan then measured 8.6-9.1 MiB). The term was fitted on written
    graphs. One run of those passes per plan that would fit (memoised)."""
    from ..transform import last_passes

    def run() -> int:
        from .heap_term import graph_heap_term

        return graph_heap_term(apply(applied.model, last_passes(applied.log.records)).model)

    return memo.cached("auto.written_heap", id(applied.model), run, applied.model)


def _with_written_heap(applied: "Applied", peak: int, heap: int, target: int) -> tuple[int, int]:
    """(peak, heap) with the heap term of the written graph where a plan would fit on its own graph's term: a plan
    is accepted on the graph `transform` writes."""
    if peak > target:
        return peak, heap
    written = written_heap(applied)
    return (peak - heap + written, written) if written > heap else (peak, heap)


def _recomputable(model: onnx.ModelProto, alone: bool = True, extend: bool = True
                  ) -> dict[str, dict[str, tuple[list[str], list[str], list[str]]]]:
    """Stashes RecomputePass can rebuild (→ the op types it clones): from cheap ops ("recompute"), and also
    through convolutions ("recompute-conv": a Conv clone is the same kernel on the same inputs, so exact, but
    it costs a forward conv; the first layer's, reading the image, is the cheap case). Per stash: the op
    types cloned, the stashes read whole, the forward tensors kept alive for it (``EXTEND_FRACTION``; none and
    no ``_deepen`` without ``extend``).

    Every question (the joint run, each stash alone, each ``_deepen`` group) is answered by
    ``RecomputePass.plan_table`` on the one cached analysis of ``model``: the pass's own selection and plans,
    without its rewrite. (Each used to be a whole ``RecomputePass.run``, i.e. load, rewrite, check and serialise
    the graph per stash: 76 % of the growth planner's 62 min on ResNet-18 at batch 1872, docs/notes/
    maxbatch8.md section 3. Same tables: tests/test_auto_planner.py compares them with the runs' records.)"""
    from ..passes import RecomputePass
    from ..passes.recompute import CHEAP_OPS, PINNED_REASON

    analysis = memo.analysis(model)
    out = {}
    fraction = EXTEND_FRACTION if extend else 0.0
    for technique, ops in (("recompute", CHEAP_OPS), (RECOMPUTE_CONV, CHEAP_OPS | {"Conv"})):
        def table(tensors: list[str] | None = None, ops: frozenset[str] = ops
                  ) -> tuple[dict[str, tuple[list[str], list[str], list[str]]], list[Any]]:
            return RecomputePass(tensors=tensors, ops=ops, extend_fraction=fraction).plan_table(analysis)

        joint, skipped = table()
        if alone:
            # Kept whole in the joint run because another recomputation reads it (a BN input under its
            # LeakyRelu's rebuilt output): the greedy may prefer the other stash's encoding, so offer it too.
            for s in skipped:
                if s.name not in joint and s.reason.startswith(PINNED_REASON):
                    own = table([s.name])[0].get(s.name)
                    if own is not None:
                        joint[s.name] = own
        for subject in [k for k, (cloned, _, _) in joint.items() if not cloned and alone]:
            # Rebuilt as a by-product of another stash's clones (a MaxPool's mask beside its output): chosen
            # alone it clones that chain itself and reads its inputs; ask for it alone.
            own = table([subject])[0].get(subject)
            if own is None:
                joint.pop(subject)
            else:
                joint[subject] = own
        if alone and extend and technique == RECOMPUTE_CONV:
            _deepen(model, joint, lambda names, table=table: table(names)[0])
        out[technique] = joint
    return out


def _deepen(model: onnx.ModelProto, joint: dict[str, tuple[list[str], list[str], list[str]]], rebuild: Any) -> None:
    """A recomputation that reads stashes which are themselves recomputable pins them whole (a dense layer's
    bottleneck conv output read from its rebuilt ReLU input): rebuild it through them instead, down to
    what they are rebuilt from, where that keeps fewer bytes (one RecomputePass plan asked for the stash and
    those inputs: it plans the stash first, through its still undecided inputs). The real rewrite does the same
    when those inputs are chosen too, and reads them as they are otherwise."""
    tensors = memo.analysis(model).tensors
    size = lambda names: sum(tensors[n].nbytes for n in names if n in tensors)  # noqa: E731
    for subject, (_, kept, _) in list(joint.items()):
        inner = [k for k in kept if k in joint and k != subject]
        if not inner:
            continue
        deeper = rebuild([subject, *inner]).get(subject)
        if deeper is not None and set(deeper[1]) != set(kept) and size(deeper[1]) < size(kept):
            joint[subject] = deeper


def _peak_region(model: onnx.ModelProto, live_at: int) -> str | None:
    """Which region technique reaches the node at the predicted peak: "chunked" (a backward region that can
    run in batch chunks), "fc" (a large fully connected weight gradient live there), else None."""
    node = model.graph.node[live_at] if live_at < len(model.graph.node) else None
    if node is None:
        return None
    if any(node.name in r.nodes for r in _longest_regions(model)):
        return "chunked"
    analysis = memo.analysis(model)
    bufs = [b for b in analysis.buffers() if b.start <= live_at <= b.end]
    if bufs:
        big = max(bufs, key=lambda b: b.size)
        t = analysis.tensors.get(big.name)
        prod = model.graph.node[t.producer] if t is not None and t.producer is not None else None
        if prod is not None and prod.op_type in ("Gemm", "MatMul") and big.name.endswith("_grad"):
            return "fc"
        if prod is not None and prod.op_type == "ConvGrad" and len(prod.output) > 1 and prod.output[1] == big.name:
            return "conv"
    return None


def _conv_grad_split_pays(model: onnx.ModelProto, live_at: int, limit: int) -> bool:
    """Is the node at ``live_at`` a ConvGrad that SplitConvGradPass would split at ``limit`` (a workspace above
    it, more saved than its blocks' copies: passes/split_conv_grad.py's rule)?"""
    from ..passes.split_conv_grad import blocks_that_pay

    node = model.graph.node[live_at] if live_at < len(model.graph.node) else None
    if node is None or node.op_type != "ConvGrad" or len(node.input) < 3:
        return False
    tensors = memo.analysis(model).tensors
    shapes = [tensors[n].shape if n in tensors else None for n in node.input[:3]]
    if any(sh is None for sh in shapes) or node_group(node) != 1:
        return False
    return blocks_that_pay(*(tuple(int(d) for d in sh) for sh in shapes), bool(node.output[0]), limit) > 1


def node_group(node: onnx.NodeProto) -> int:
    from ..passes.base import node_attr

    return int(node_attr(node, "group", 1))


def _input_blocks(model: onnx.ModelProto) -> list[Any]:
    """The blocks reading the graph input (passes/chunk_input_block.py), found once per model per session."""
    import onnx_ir as ir

    from ..passes.chunk_input_block import find_input_blocks

    return memo.cached("auto.input_blocks", id(model),
                       lambda: find_input_blocks(ir.serde.deserialize_model(model).graph)[0], model)


def _input_block_at_peak(model: onnx.ModelProto, bufs: list[Any]) -> bool:
    """Is a forward tensor of a block reading the graph input (passes/chunk_input_block.py), or a copy of it
    (decoded, recomputed), among the largest buffers live at the peak?"""
    blocks = [*_input_blocks(model), *_input_chains(model)]
    names = {v.name for b in blocks for n in b.forward for v in n.outputs if v.name}
    keys = {n.replace("/", "_").strip("_") for n in names} | names
    return any(b.name in names or any(k in b.name for k in keys) for b in bufs)


def _input_block_forward_floor(model: onnx.ModelProto) -> int:
    """Bytes the input block's forward holds at once unchunked: its conv output and, with a BatchNorm, the
    BatchNorm output beside it (0 without such a block)."""
    blocks = _input_blocks(model)
    if not blocks:
        return 0
    y = blocks[0].conv.outputs[0]
    return 4 * int(np.prod([int(d) for d in y.shape])) * (2 if blocks[0].bn is not None else 1)


def _input_block_chunks(model: onnx.ModelProto, target: int, need_block: bool = False) -> int:
    """Chunks for the input block: its conv output per chunk within a sixteenth of the target (0 with
    ``need_block`` where the graph has no such block)."""
    blocks = _input_blocks(model)
    if not blocks:
        return 0 if need_block else 2
    y = blocks[0].conv.outputs[0]
    nbytes = 4 * int(np.prod([int(d) for d in y.shape]))
    batch = int(y.shape[0])
    return int(min(batch, max(2, -(-nbytes // max(1, target // 16)))))


MAX_CHAIN_BATCHNORMS = 4
# Below these the chain is not worth it: a chain whose largest working set is ~2 MiB saves less than glibc's
# heap slack (two small test nets measured 1.3-2.2 MB over 0.8-1.3 MB budgets chunked), while mobilenet_v1_s's
# 3.8 MiB depthwise-separable layers measured within budget chunked (NOTES-suite4x.md). Each chunk should
# still hold about a MiB per layer: more chunks only multiply the graph ((B + 1) passes per chunk; 15 chunks of
# mobilenet_v1_s's 4 layers made a 6500-node graph whose first planning round took over 10 min).
# The chunk count chosen here is where the search starts; once a chunked plan fits, ``_fewer_chunks`` prices
# the nodes (NODE_BYTES) and keeps the fewest chunks whose predicted peak still fits.
MIN_CHUNK_WORKING_SET = 1 << 20
MIN_CHAIN_WORKING_SET = 3 << 20
# What one graph node costs under ORT's default session settings (buffer reuse and memory pattern on): the first
# run keeps ~370 B of bookkeeping per node, for the rest of the session. tools/ort_node_overhead.py measured
# 362-437 B/node on 15k-45k-node chains (ORT 1.19.2); ResNet-18's lossy plan rebuilt with 8 / 16 / 26 batch
# chunks grew 338 B per node under ORT's defaults (docs/notes/lossyr18.md §2). onnxcomp's own step peak does
# not see it (it is kept from the first run on); the planner's prediction does not either. Used to price a
# chunked plan's nodes against its predicted peak (``_fewer_chunks``).
NODE_BYTES = 370


def _input_chains(model: onnx.ModelProto, blocks: bool = False) -> list[Any]:
    """The longest layer chains from the graph input (passes/chunk_input_chain.py), found once per model;
    with ``blocks``, chains that go on through residual blocks."""
    import onnx_ir as ir

    from ..passes.chunk_input_chain import find_input_chains

    return memo.cached(f"auto.input_chains{'.blocks' if blocks else ''}", id(model),
                       lambda: find_input_chains(ir.serde.deserialize_model(model).graph, blocks=blocks)[0], model)


MAX_BLOCK_CHAIN_BATCHNORMS = 12


def _chain_units_at_peak(model: onnx.ModelProto, bufs: list[Any]) -> int:
    """How many units of the chain through residual blocks reach the last one whose tensors (their
    gradients, decoded or recomputed copies) are among the largest buffers live at the peak (0: none)."""
    chains = _input_chains(model, blocks=True)
    if not chains:
        return 0
    reach = 0
    for u, unit in enumerate(chains[0].layers):
        names = {v.name for n in unit.forward for v in n.outputs if v.name}
        keys = names | {n.replace("/", "_").strip("_") for n in names}
        if any(b.name in keys or any(b.name.startswith(k) for k in keys) for b in bufs):
            reach = u + 1
    return reach


def _input_chain_floor(model: onnx.ModelProto) -> int:
    """The largest unchunked forward working set (input, conv output, BatchNorm output) of a layer the input
    chain could take, past its first (0 without one): a floor no per-stash option reaches."""
    from ..passes.chunk_input_chain import chain_working_sets

    chains = _input_chains(model)
    return max(chain_working_sets(chains[0])[1:], default=0) if chains else 0


def _input_chain(model: onnx.ModelProto, target: int, further: bool = False, at_least: int = 0
                 ) -> tuple[int, int]:
    """(layers, chunks) for the chunked input chain: every leading layer whose unchunked forward working set
    is above a quarter of the target (a sixteenth ``further``, when the search is stuck; at least the first),
    chunked so the chain's maps per chunk stay within an eighth of it; (0, 0) without a chain of two or more
    such layers (the input block alone then). ``further`` where the chain goes on through residual blocks:
    ``at_least`` units (the caller's count so far plus one, or through the block at the peak), each unit's
    working set above a sixteenth of the target."""
    from ..passes.chunk_input_chain import chain_working_sets

    chains = _input_chains(model)
    cap = MAX_CHAIN_BATCHNORMS
    with_blocks = _input_chains(model, blocks=True) if further else []
    if with_blocks and chains and len(with_blocks[0].layers) > len(chains[0].layers):
        chains, cap = with_blocks, MAX_BLOCK_CHAIN_BATCHNORMS
    if not chains:
        return 0, 0
    sets = chain_working_sets(chains[0])
    layers = max([j + 1 for j, ws in enumerate(sets) if ws > target // (16 if further else 4)], default=1)
    if cap == MAX_BLOCK_CHAIN_BATCHNORMS:
        # One unit more at a time: each block adds BatchNorm passes over the chain below it.
        layers = min(layers, max(2, at_least))
    # Each BatchNorm in the chain adds a recomputation pass of the chain below it, forward and backward: the
    # graph and the step grow with their square. Stop before the chain holds more than a few.
    bns = np.cumsum([layer.batchnorms for layer in chains[0].layers])
    layers = min(layers, max(1, int(np.searchsorted(bns, cap, side="right"))))
    if layers < 2 and _input_blocks(model):
        return 0, 0
    # A chain whose largest working set is a few MiB saves less than the allocator's own slack at that scale
    # (small nets in the tests measured 1.3-2.2 MB against 0.8-1.3 MB budgets chunked, within them unchunked).
    if max(sets[:layers]) < MIN_CHAIN_WORKING_SET:
        return 0, 0
    batch = int(chains[0].conv.inputs[0].shape[0])
    chunks = int(min(batch, max(2, -(-sum(sets[:layers]) // max(1, target // 8)))))
    # Chunks whose working set falls below a few hundred KiB gain nothing real: their tensors sit under the
    # allocator's mmap threshold (measure pins 128 KiB), where freed memory stays in the heap, so the step's
    # measured peak no longer follows the prediction (a 16-chunk plan of a tiny net: 0.57 MB predicted,
    # 3.3 MB measured); and every chunk grows the graph (MIN_CHUNK_WORKING_SET).
    # Taken further (stuck, through residual blocks): half that per chunk, so a small batch can go down to one
    # image per chunk (wide_resnet_s: batch 8, 7.0 MiB largest unit; chunks of 2 images left its chain's
    # backward above the target). Still 4x the allocator's mmap threshold.
    per_chunk = max(1, MIN_CHUNK_WORKING_SET // 2 if cap == MAX_BLOCK_CHAIN_BATCHNORMS else MIN_CHUNK_WORKING_SET)
    chunks = min(chunks, max(2, round(max(sets[:layers]) / per_chunk)))
    return layers, min(chunks, max(2, mmap_safe_chunks(chains[0].layers[:layers])))


# glibc's mmap threshold as `measure` pins it (runtime/measure.py, MALLOC_ENV): blocks this large or larger are
# mapped fresh and unmapped on free; smaller ones come from the heap.
MMAP_THRESHOLD = 128 << 10


def mmap_safe_chunks(units: list[Any]) -> int:
    """The most batch chunks that keep every conv output of ``units`` (a chain's layers and residual blocks; the
    BatchNorm and activation outputs beside them are as large, the maps they read are earlier outputs) at or
    above MMAP_THRESHOLD per chunk (at least 1). The graph input is not counted: one slice of it per chunk.

    Why: a chunk's tensors under the threshold live on glibc's heap, and thousands of them per step (every unit
    runs once per chunk) scatter over the heap's free space between the blocks ORT's first run leaves allocated:
    the step touches all of it although few are live at once. ResNet-18's 12 MiB plan (5 units in 16 chunks,
    layer2's maps 64 KiB per chunk) allocated 12,374 heap tensors per step, at most 1.9 MiB of them live, and its
    steps grew RSS by 19.6-30.7 MiB over a trimmed baseline against 10.2 MiB predicted (the old, untrimmed baseline
    read 2-9 MiB and once 22 MiB); in 8 chunks every map is >= 128 KiB (docs/notes/peakjump.md)."""
    sizes = [int((v.dtype.itemsize if v.dtype is not None else 4) * int(np.prod([int(d) for d in v.shape])))
             for unit in units for n in unit.forward if n.op_type == "Conv"
             for v in n.outputs[:1] if v.shape is not None]
    return max(1, min(sizes) // MMAP_THRESHOLD) if sizes else 1 << 30


def _enable_input_region(model: onnx.ModelProto, regions: Regions, target: int, further: bool = False,
                         at_least: int = 0) -> None:
    """Chunk the input block, or the chain of layers from the input where one reaches further (not after a row
    split: it has rewritten the chain's convs, the chain pass would find none)."""
    layers, chunks = _input_chain(model, target, further, at_least) if regions.rows is None else (0, 0)
    regions.input_chain_layers = layers
    regions.input_block_chunks = chunks if layers else _input_block_chunks(model, target)


def _input_region_batch(model: onnx.ModelProto, regions: Regions) -> int:
    """The batch the chunked input region splits (0 where the graph shows none)."""
    if regions.input_chain_layers:
        chains = _input_chains(model, blocks=True) or _input_chains(model)
        shape = chains[0].conv.inputs[0].shape if chains else None
    else:
        blocks = _input_blocks(model)
        shape = blocks[0].conv.outputs[0].shape if blocks else None
    try:
        return int(shape[0]) if shape is not None else 0
    except (TypeError, ValueError):
        return 0


def chunk_candidates(batch: int, chunks: int) -> list[int]:
    """Chunk counts below ``chunks`` worth trying, ascending: those that divide the batch evenly (equal chunks:
    ORT's buffer reuse then matches every chunk's tensors by shape; uneven counts left ResNet-18's reuse pass
    adding up to 26.5k view nodes, docs/notes/lossyr18.md §2), or every count from 2 where none does."""
    even = [k for k in range(2, chunks) if batch % k == 0]
    return even or list(range(2, chunks))


def plan_cost(pattern: int, nodes: int) -> int:
    """What a plan is ranked by among those that fit (the budget itself is checked on the predicted live peak):
    what ORT's default session settings keep for it, i.e. its modelled memory-pattern block (``modelled_pattern``)
    plus NODE_BYTES per node. The live peak alone does not rank chunk counts: fewer, larger chunks left it
    unchanged on ResNet-18 at 20 MiB (input block 8 → 4 chunks) and leaky_vgg (chain 16 → 8) while ORT's pattern
    block grew 3.5 / 6.3 MiB under its defaults (docs/notes/fewchunks.md)."""
    return int(pattern) + NODE_BYTES * int(nodes)


def modelled_pattern(model: onnx.ModelProto) -> int:
    """ORT's memory-pattern block for ``model`` under its defaults: ORT optimises the graph (one session set-up,
    nothing runs) and its allocation and pattern planners are replayed on the result
    (``planner.ort_pattern.predict_pattern_block``: within 0.05 % of the measured block on 21 of 24 graphs,
    docs/notes/patternblock.md). Where ORT cannot set the graph up here, the same replay without ORT's graph
    optimisations (``replay_pattern_block``), the reason logged (``ort_pattern.pattern_block_or_replay``; the
    plan's ``rounds`` name the source)."""
    return modelled_pattern_block(model).size


def modelled_pattern_block(model: onnx.ModelProto) -> Any:
    """``modelled_pattern``'s ``PatternBlock``, with its ``source`` and ``fallback_reason``."""
    from .ort_pattern import pattern_block_or_replay

    return pattern_block_or_replay(model, purpose="auto planner's chunk ranking")


# Up to this many fewer chunk counts are each evaluated by ``_fewer_chunks`` (batch 32 from 8 or 16 chunks: 2 or 3).
MAX_CHUNK_CANDIDATES = 3


def fewest_chunks(candidates: list[int], fits: Any) -> list[int]:
    """The candidate counts (ascending) to evaluate to find the fewest that fits, by bisection: the predicted
    peak only falls as chunks are added (each chunk holds less of the batch), so one evaluation halves what is
    left (ResNet-18: 2-3 evaluations of minutes each instead of every count). ``fits(k)`` evaluates (and
    should remember) count ``k``; returns the counts evaluated."""
    lo, hi, tried = 0, len(candidates), []
    while lo < hi:
        mid = (lo + hi) // 2
        tried.append(candidates[mid])
        if fits(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    return tried


def _has_encoding(options: dict[str, list[Option]], stash: str) -> bool:
    return any(not o.technique.startswith("recompute") for o in options.get(stash, []))


@dataclass
class _Base:
    """The graph the virtual curve is drawn on (scheduling and split weights applied), with its options."""
    live: np.ndarray
    analysis: GraphAnalysis
    windows: dict[str, _Window]
    options: dict[str, list[Option]]
    regions: list[Any]                       # backward regions that can run in batch chunks (chunk_backward)
    heap: int = 0                            # the base graph's heap term: the virtual curve plans below it


def _make_base(model: onnx.ModelProto, regions: Regions, techniques: list[Technique], costs: _Costs,
               exact: bool, min_bytes: int, workspace_aware: bool = True) -> _Base:
    from ..passes import DeferWeightGradientPass, EagerAccumulationPass

    base = memo.cached("auto.base_graph", (id(model), regions.first_key()), lambda: apply(
        model, [*regions.first_passes(), DeferWeightGradientPass(), EagerAccumulationPass()]).model, model)
    seen, live = predicted_live(base)
    analysis = memo.analysis(seen)
    windows = stash_windows(analysis)
    alone = not regions.joint_recompute
    options = memo.cached("auto.options", (id(seen), alone, regions.extend, exact, min_bytes,
                                           tuple(t.name for t in techniques)),
                          lambda: enumerate_options(analysis, techniques,
                                                    _recomputable(seen, alone=alone, extend=regions.extend),
                                                    costs, exact, min_bytes, windows), seen)
    if not workspace_aware:
        options = {k: [replace(o, workspace=(0, 0)) for o in v] for k, v in options.items()}
    if not regions.pyops:
        options = {k: kept for k, v in options.items() if (kept := [o for o in v if o.native])}
    relieved = {o.relieves for opts in options.values() for o in opts if o.relieves}
    windows.update(stash_windows(analysis, relieved))
    chunkable = [] if exact else _longest_regions(seen)
    if regions.rows is not None:
        # The row blocks' ConvGrad clones are first layers too; their working set is a block already.
        from .auto_rows import outside_row_blocks

        chunkable = outside_row_blocks(chunkable)
    return _Base(live, analysis, windows, options, chunkable, predicted_heap(seen))


def _longest_regions(model: onnx.ModelProto) -> list[Any]:
    """Backward regions that can run in batch chunks (passes/chunk_backward.py), the longest per terminal."""
    return memo.cached("auto.longest_regions", id(model), lambda: _longest_regions_uncached(model), model)


def _longest_regions_uncached(model: onnx.ModelProto) -> list[Any]:
    from ..passes.chunk_backward import chunkable_regions

    longest: dict[str, Any] = {}
    for r in chunkable_regions(model, predict=False):
        if r.terminal not in longest or len(r.nodes) > len(longest[r.terminal].nodes):
            longest[r.terminal] = r
    return list(longest.values())


def _chunked_options(base: _Base, costs: _Costs) -> tuple[dict[str, list[Option]], np.ndarray]:
    """With backward regions in batch chunks: a BN input the region recomputes per chunk from the image is
    no stash any more, stashes the region reads keep only non-recompute options (it slices them), and the
    region's own nodes are left to the real prediction."""
    options = dict(base.options)
    graph = base.analysis.model.graph
    ignore = np.zeros(len(base.live), dtype=bool)
    index = {n.name: i for i, n in enumerate(graph.node)}
    by_name = {st.name: st for st in base.analysis.stashed}
    for region in base.regions:
        x = region.recomputed_input
        if x in by_name:
            conv = graph.node[by_name[x].producer] if by_name[x].producer is not None else None
            secs = costs.ops(base.analysis, [conv] if conv is not None else [])
            options[x] = [Option(x, "chunked", False, by_name[x].nbytes, 0, secs,
                                 "recomputed per batch chunk from the image inside a chunked backward region")]
        for name in region.nodes:
            if name not in index:
                continue
            ignore[index[name]] = True
            for i in graph.node[index[name]].input:
                if i in options and i != x:
                    options[i] = [o for o in options[i] if not o.technique.startswith("recompute")]
    return options, ignore


def plan_auto(model: onnx.ModelProto, budget: int, *, exact: bool = False, min_bytes: int = 64 * 1024,
              margin: float = DEFAULT_MARGIN, progress: Any = None, workspace_aware: bool | None = None,
              rows: Any = False, pyops: bool = True) -> AutoPlan:
    """The cheapest plan (by predicted seconds) whose predicted step peak fits ``budget`` bytes, applied.

    ``plan.fits`` is False when nothing reachable fits; the plan then holds the best reachable graph and
    what dominates its peak (the caller raises BudgetError).

    ``workspace_aware``: search with the codec ops' workspace on the virtual curve (True), without it (False:
    the real prediction still counts it), or (None) the first, then the second where the first misses the
    budget, keeping the lower peak. Neither search dominates: with it the greedy steers big tensors away
    from memory-hungry codecs (MobileNetV2: floor 67 → 52 MiB predicted); without it, it reaches plans whose
    workspace spikes only the rounds' real prediction sorts out (ResNet-18: floor 19 MiB against 24).

    ``rows``: False — plan without a row split, and where that misses the budget (lossy only), plan again
    with the conv chains row-split first (planner/auto_rows.py) and keep the lower peak; None — never;
    a ``RowsChoice`` — with that row split.

    ``pyops``: False — only options that run as ORT ops (``Regions.pyops``; no codec PyOp)."""
    if not memo.active():
        # One planning session for all the searches below (planner/memo.py): same plan, found sooner.
        with memo.planning_session():
            return plan_auto(model, budget, exact=exact, min_bytes=min_bytes, margin=margin, progress=progress,
                             workspace_aware=workspace_aware, rows=rows, pyops=pyops)
    if rows is False:
        plain = plan_auto(model, budget, exact=exact, min_bytes=min_bytes, margin=margin, progress=progress,
                          workspace_aware=workspace_aware, rows=None, pyops=pyops)
        if plain.fits or exact:
            return plain
        from .auto_rows import choose_rows

        # Tried whenever a chain's split lowers the baseline: its own peak, before stash options and split
        # weights, says nothing about where the search ends from it.
        choice = memo.cached("auto.rows", (id(model), plain.baseline_peak),
                             lambda: choose_rows(model, plain.baseline_peak), model)
        if choice is None:
            return plain
        split = plan_auto(model, budget, exact=exact, min_bytes=min_bytes, margin=margin, progress=progress,
                          workspace_aware=workspace_aware, rows=choice, pyops=pyops)
        return split if split.fits or split.predicted_peak < plain.predicted_peak else plain
    if workspace_aware is None:
        first = plan_auto(model, budget, exact=exact, min_bytes=min_bytes, margin=margin, progress=progress,
                          workspace_aware=True, rows=rows, pyops=pyops)
        if first.fits:
            return first
        second = plan_auto(model, budget, exact=exact, min_bytes=min_bytes, margin=margin, progress=progress,
                           workspace_aware=False, rows=rows, pyops=pyops)
        return second if second.fits or second.predicted_peak < first.predicted_peak else first

    if budget <= 0:
        raise OnnxcompError(f"budget {budget} bytes: must be positive", options=("budget_bytes",))
    # Option sets the greedy is not monotone in, tried in turn while the plan misses the budget; the lowest
    # peak is kept. (joint_recompute, extend):
    # - extend=False: without kept-alive forward tensors and _deepen. More recomputations on offer can end
    #   higher: on leaky_vgg the cheap rebuild of a LeakyRelu output from its BN input (reading the conv
    #   output whole) wins the first steps, pins that conv output, and the recompute-conv that would free
    #   it is never taken (31.6 MiB floor predicted, against 24.5 MiB without the extension).
    # - joint_recompute=True: recomputations sized as one joint rewrite makes them (a MaxPool mask free
    #   beside its output) are optimistic, yet the greedy sometimes ends lower with them.
    # - transformer=True (graphs with LayerNorm / Softmax gradients only): the exact transformer passes.
    plan: AutoPlan | None = None
    variants = [(False, True, False), (False, False, False), (True, True, False)]
    if _has_transformer_gradients(model):
        variants.append((False, True, True))
    for joint, extend, transformer in variants:
        other = _plan_auto(model, budget, exact, min_bytes, margin, progress, joint_recompute=joint,
                           workspace_aware=workspace_aware, rows=rows, extend=extend, transformer=transformer,
                           pyops=pyops)
        if plan is None or other.fits or other.predicted_peak < plan.predicted_peak:
            plan = other
        if plan.fits:
            break
    assert plan is not None
    return plan


def _has_transformer_gradients(model: onnx.ModelProto) -> bool:
    """Whether the training graph differentiates a LayerNorm or a Softmax (what the transformer passes rebuild)."""
    from ..passes.early_weight_grad import TRANSFORMER_GRADS

    return any(n.op_type in TRANSFORMER_GRADS for n in model.graph.node)


def _plan_auto(model: onnx.ModelProto, budget: int, exact: bool, min_bytes: int, margin: float, progress: Any,
               joint_recompute: bool, workspace_aware: bool, rows: Any = None, extend: bool = True,
               transformer: bool = False, pyops: bool = True) -> AutoPlan:
    say = progress or (lambda _m: None)
    _, untouched = predicted_live(model, eager_accumulation=False)
    baseline_peak = int(untouched.max()) if len(untouched) else 0
    target = planning_target(budget, margin)
    costs = _Costs()
    techniques = encoding_techniques()
    # commute_pools stays off: on densenet_s it lowered the predicted floor (16.4 -> 15.9 MiB) but the plans
    # measured worse than without it (18.8 MiB budget: 16.41 vs 15.91 MiB; 17.8: 18.55 MiB, over budget;
    # NOTES-widesuite.md). The region is there for an explicit Regions(commute_pools=True).
    regions = Regions(joint_recompute=joint_recompute, rows=rows, extend=extend, transformer=transformer,
                      pyops=pyops)
    if not exact and max(_input_block_forward_floor(model), _input_chain_floor(model)) > target:
        # The block's forward alone holds its conv and BatchNorm outputs together: above the target, no
        # per-stash option can help; chunk it from the start (saves the rounds that would find it).
        _enable_input_region(model, regions, target)
    base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
    options, ignore = base.options, None
    banned: set[tuple[str, str]] = set()     # (stash, technique) the real prediction showed to backfire
    chosen: dict[str, Option] = {}
    correction = 0
    best: AutoPlan | None = None
    rounds: list[dict[str, Any]] = []
    for _ in range(MAX_ROUNDS):
        # Exact plans search the greedy's start too (greedy_restarts) where it misses the target; lossy plans keep
        # the plain greedy: their tiers make "lower peak" trade accuracy, and they were not re-measured with it.
        search = greedy_restarts if exact else greedy
        # The virtual curve is live data only: it plans below the target less the base graph's heap term (the
        # real prediction below adds the rewritten graph's own; the correction takes up the difference).
        chosen, virtual = search(base.live, base.windows, options, chosen, target - correction - base.heap, ignore,
                                 banned)
        applied, seen_out, live_out = _evaluate(model, chosen, regions, techniques, min_bytes)
        out = applied.model
        peak, bufs = _peak_buffers(seen_out, live_out)
        peak, heap = _with_written_heap(applied, peak, predicted_heap(seen_out), target)
        at = int(np.argmax(live_out)) if len(live_out) else 0
        dominant = [(b.name, int(b.size)) for b in bufs[:3]]
        rounds.append({"virtual_peak_bytes": virtual, "predicted_peak_bytes": peak, "heap_bytes": heap,
                       "nodes": len(seen_out.graph.node), "options": len(chosen),
                       "chunked": regions.chunked, "split_weight_bytes": regions.split_weight_bytes})
        say(f"auto: {len(chosen)} stash option(s), {regions}: virtual {virtual / MiB:.1f} MiB, "
            f"predicted {peak / MiB:.1f} MiB with {heap / MiB:.1f} MiB heap term ({len(seen_out.graph.node)} nodes; "
            f"target {target / MiB:.1f} MiB)")
        plan = AutoPlan(budget, exact, target, dict(chosen), replace(regions),
                        peak, baseline_peak, peak <= target, dominant, [], out, applied,
                        costs.source, sum(o.seconds for o in chosen.values()), heap_bytes=heap,
                        nodes=len(seen_out.graph.node))
        if best is None or plan.fits or peak < best.predicted_peak:
            best = plan
        if plan.fits:
            break
        # 1. Recomputed clones among the largest tensors at the peak: they all land at one backward reader
        #    (e.g. the stem's conv, BN and ReLU outputs rebuilt together); hold those stashes otherwise.
        clones = {b.name.split("__recomputed")[0] for b in bufs[:6] if "__recomputed" in b.name}
        backfired = [o for o in chosen.values() if o.technique.startswith("recompute")
                     and (o.stash in clones or clones & set(o.rebuilds))]
        # Those with another way to be held go first: banning one with none (the stem conv's output) would
        # only leave its stash raw.
        backfired = [o for o in backfired if _has_encoding(options, o.stash)] or backfired
        if backfired:
            for o in backfired:
                banned.add((o.stash, o.technique))
                chosen.pop(o.stash)
            continue
        # 2. A backward region no stash option reaches.
        where = _peak_region(seen_out, at)
        if not exact and where == "chunked" and not regions.chunked and base.regions:
            regions.chunked = True
            options, ignore = _chunked_options(base, costs)
            chosen = {k: o for k, o in chosen.items() if o in options.get(k, [])}
            continue
        if not exact and not regions.input_block_chunks and _input_block_at_peak(model, bufs[:4]):
            _enable_input_region(model, regions, target)
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            # The search starts over on the new graph: the lossy tiers the old peak forced may not be needed.
            chosen, correction = {}, 0
            continue
        split_grad = int(max(MiB // 4, target // 16))
        if not exact and not regions.split_conv_grad_bytes and _conv_grad_split_pays(seen_out, at, split_grad):
            # A ConvGrad's one-image im2col buffer at the peak: no stash option or batch chunk shrinks it.
            regions.split_conv_grad_bytes = split_grad
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            chosen = {k: o for k, o in chosen.items() if o in options.get(k, [])}
            continue
        if not exact and where == "conv" and not regions.split_conv_bytes:
            regions.split_conv_bytes = int(max(MiB // 4, min(32 * MiB, budget // 8)))
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            # The search starts over on the new graph: the lossy tiers the old peak forced may not be needed.
            chosen, correction = {}, 0
            continue
        if where == "fc" and not regions.split_weight_bytes:
            regions.split_weight_bytes = int(max(MiB, min(32 * MiB, budget // 8)))
            regions.split_bit_identical = exact
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            chosen = {k: o for k, o in chosen.items() if o in options.get(k, [])}
            continue
        # 3. The virtual curve was optimistic: plan lower and go on upgrading.
        if virtual <= target - correction - base.heap:
            correction += max(peak - target, MiB // 4)
            continue
        # 4. Stuck: the chunked first-layer backward, if not tried, may still help.
        if not exact and not regions.chunked and base.regions:
            regions.chunked = True
            options, ignore = _chunked_options(base, costs)
            chosen = {k: o for k, o in chosen.items() if o in options.get(k, [])}
            continue
        if not exact and not regions.input_block_chunks and (_input_block_chunks(model, target, need_block=True)
                                                             or _input_chains(model)):
            _enable_input_region(model, regions, target)
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            # The search starts over on the new graph: the lossy tiers the old peak forced may not be needed.
            chosen, correction = {}, 0
            continue
        at_least = max(max(regions.input_chain_layers, 1) + 1, _chain_units_at_peak(model, bufs[:4]))
        if not exact and regions.input_block_chunks and regions.rows is None \
                and _input_chain(model, target, further=True, at_least=at_least)[0] > regions.input_chain_layers:
            # Still stuck with the input region chunked: take the chain further, down to smaller maps (through
            # residual blocks: one more, or through the one at the peak).
            _enable_input_region(model, regions, target, further=True, at_least=at_least)
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            chosen, correction = {}, 0
            continue
        fewer = [k for k in chunk_candidates(_input_region_batch(model, regions), regions.input_block_chunks)
                 if k >= 2] if regions.input_block_chunks > 2 else []
        if not exact and fewer and heap >= peak - target:
            # Still stuck, and the heap term the chunks' nodes bring is at least the excess: fewer chunks (the
            # next count down) hold more live data but fewer nodes; the search starts over on that graph.
            regions.input_block_chunks = fewer[-1]
            base = _make_base(model, regions, techniques, costs, exact, min_bytes, workspace_aware)
            options, ignore = (_chunked_options(base, costs) if regions.chunked else (base.options, None))
            chosen, correction = {}, 0
            continue
        break
    assert best is not None
    if not exact and best.regions.input_block_chunks > 2:
        # Also where the plan misses: with the heap term, fewer chunks (fewer nodes) can lower the peak.
        best = _fewer_chunks(model, best, techniques, min_bytes, say, rounds)
    best.rounds = rounds
    if best.model is not None:
        best.step_seconds = (costs.step(model), costs.step(best.model))
    return best


def _fewer_chunks(model: onnx.ModelProto, plan: AutoPlan, techniques: list[Technique], min_bytes: int,
                  say: Any, rounds: list[dict[str, Any]]) -> AutoPlan:
    """A plan with its input region in batch chunks, re-chunked. Where it fits: the fewest chunks (even where the
    batch allows) whose predicted peak still fits, or the plan as it was, whichever costs less by ``plan_cost``
    (what ORT's defaults keep: modelled pattern block plus NODE_BYTES per node). Where it misses: the fewest chunks
    that fit, else the lowest predicted peak (the predicted peak counts the heap term, which grows with the
    nodes every chunk repeats: fewer chunks can be lower).

    Each chunk repeats the chunked region's forward and backward (and each BatchNorm's recomputation pass of the
    chain below it), so the graph grows with the chunk count: ResNet-18's 15 MiB plan (26 chunks through 5
    units) was a 45,460-node graph that grew 38.6 MiB under ORT's defaults; the same regions in 8 chunks, 14,769
    nodes, 28.7 MiB, with a predicted peak still within the budget (docs/notes/lossyr18.md). The search's
    own chunk count comes from a rule of thumb on the chain's working sets (``_input_chain``); only the real
    prediction says how few still fit. Same stash options and other regions: only the chunk count changes, so
    no lossy tier or recomputation is added for it."""
    batch = _input_region_batch(model, plan.regions)
    candidates = chunk_candidates(batch, plan.regions.input_block_chunks) if batch else []
    if not candidates or plan.model is None:
        return plan
    found: dict[int, AutoPlan] = {}
    missed: dict[int, AutoPlan] = {}

    def fits(k: int) -> bool:
        regions = replace(plan.regions, input_block_chunks=k)
        applied, seen_out, live_out = _evaluate(model, plan.chosen, regions, techniques, min_bytes)
        peak, bufs = _peak_buffers(seen_out, live_out)
        peak, heap = _with_written_heap(applied, peak, predicted_heap(seen_out), plan.target)
        nodes = len(seen_out.graph.node)
        say(f"auto: input region in {k} chunk(s) instead of {plan.regions.input_block_chunks}: predicted "
            f"{peak / MiB:.1f} MiB with {heap / MiB:.1f} MiB heap term (target {plan.target / MiB:.1f} MiB), "
            f"{nodes} nodes")
        rounds.append({"input_block_chunks": k, "predicted_peak_bytes": peak, "heap_bytes": heap, "nodes": nodes,
                       "options": len(plan.chosen), "chunked": regions.chunked,
                       "split_weight_bytes": regions.split_weight_bytes})
        other = replace(plan, regions=regions, predicted_peak=peak, fits=peak <= plan.target,
                        dominant=[(b.name, int(b.size)) for b in bufs[:3]], model=applied.model,
                        applied=applied, heap_bytes=heap, nodes=nodes)
        (found if other.fits else missed)[k] = other
        return other.fits

    if len(candidates) <= MAX_CHUNK_CANDIDATES:
        # The heap term grows with the nodes each chunk repeats while the live data falls: the predicted peak is
        # not monotone in the chunk count any more, so a few candidates are all evaluated, not bisected.
        for k in candidates:
            fits(k)
    else:
        fewest_chunks(candidates, fits)
    if not found:
        # Nothing with fewer chunks fits: keep the lowest predicted peak (the best reachable, for the failure).
        low = min(missed.values(), key=lambda p: p.predicted_peak, default=plan)
        return low if not plan.fits and low.predicted_peak < plan.predicted_peak else plan
    if not plan.fits:
        return found[min(found)]

    def cost(p: AutoPlan) -> int:
        assert p.model is not None
        block = modelled_pattern_block(p.model)
        c = plan_cost(block.size, len(p.model.graph.node))
        say(f"auto: {p.regions.input_block_chunks} chunk(s): modelled pattern block + nodes {c / MiB:.1f} MiB"
            + (f" (replayed without ORT: {block.fallback_reason})" if block.fallback_reason else ""))
        rounds.append({"input_block_chunks": p.regions.input_block_chunks, "plan_cost_bytes": c,
                       "pattern_source": block.source,
                       **({"pattern_fallback_reason": block.fallback_reason} if block.fallback_reason else {})})
        return c

    # The fewest chunks that fit against the plan as it was (the others in between were not evaluated).
    fewest = found[min(found)]
    return fewest if cost(fewest) < cost(plan) else plan


# ------------------------------------------------------------------------------------------------- report
def render_plan(summary: dict[str, Any], console: Any = None) -> None:
    """The plan as a table: one row per decision, then the predicted peak against the budget."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=180)
    t = Table(title=f"auto plan for a budget of {summary['budget_bytes'] / MiB:.1f} MiB"
                    f"{' (exact only)' if summary['exact'] else ''}", header_style="bold")
    for col, kw in [("tensor / region", {"overflow": "fold", "max_width": 48}), ("technique", {}),
                    ("exact", {}), ("MiB", {"justify": "right"}), ("held MiB", {"justify": "right"}),
                    ("ms", {"justify": "right"}), ("why", {"overflow": "fold", "max_width": 60})]:
        t.add_column(col, **kw)
    for d in summary["decisions"]:
        if "tensor" in d:
            t.add_row(d["tensor"], d["technique"], "yes" if d["exact"] else "no", f"{d['original_bytes'] / MiB:.2f}",
                      f"{d['held_bytes'] / MiB:.2f}", f"{1000 * d['predicted_seconds']:.1f}", d["why"])
        else:
            t.add_row(d["region"], d["technique"], "yes" if d.get("exact") else "no", "", "", "", d["why"])
    console.print(t)
    g = summary.get("ort_defaults")
    if g is not None:   # --budget-for ort-defaults: the step target is the mode's, not the user's budget
        planned = "no step target" if g.get("step_budget_bytes") is None else \
            f"step target {g['step_budget_bytes'] / MiB:.1f} MiB, chosen for the growth budget"
    else:
        planned = f"planned to {summary['target_bytes'] / MiB:.1f} MiB: the budget less the predictor's margin"
    console.print(f"predicted step peak {summary['baseline_predicted_peak_bytes'] / MiB:.1f} → "
                  f"{summary['predicted_peak_bytes'] / MiB:.1f} MiB ({planned}); predicted extra step time "
                  f"{1000 * summary['predicted_extra_seconds']:.0f} ms ({summary['cost_source']})")
    if g and g.get("predicted_growth_bytes") is not None and g.get("budget_for") == "ort-defaults-total":
        console.print(f"ORT defaults: predicted growth {g['predicted_growth_bytes'] / MiB:.1f} MiB + set-up added "
                      f"{g.get('predicted_set_up_added_bytes', 0) / MiB:.1f} MiB = {g['predicted_total_bytes'] / MiB:.1f}"
                      f" MiB against a budget of {g['growth_budget_bytes'] / MiB:.1f} MiB (planned to "
                      f"{g['growth_target_bytes'] / MiB:.1f}); {len(g['candidates'])} step-peak target(s) priced")
    elif g and g.get("predicted_growth_bytes") is not None:
        console.print(f"ORT defaults: predicted growth {g['predicted_growth_bytes'] / MiB:.1f} MiB against a budget "
                      f"of {g['growth_budget_bytes'] / MiB:.1f} MiB (planned to {g['growth_target_bytes'] / MiB:.1f}); "
                      f"{len(g['candidates'])} step-peak target(s) priced")
    step = summary.get("predicted_step_seconds") or {}
    if step.get("baseline") and step.get("plan"):
        console.print(f"predicted step time {step['baseline']:.3f} → {step['plan']:.3f} s "
                      f"({step['plan'] / step['baseline']:.2f}×)")


def preview_auto(model: onnx.ModelProto, budget: int, *, exact: bool = False, as_json: bool = False,
                 report: dict[str, Any] | None = None, batch: int | None = None, where: str = "model",
                 budget_for: str = "step-peak") -> int:
    """`onnxcomp inspect --budget`: plan without writing anything; 2 when the budget cannot be met."""
    import json
    import sys

    from ..static_batch import prepare_for_transform

    model = prepare_for_transform(model, where, batch=batch)
    from .growth_budget import GROWTH_MODES, default_pyops

    if budget_for in GROWTH_MODES:
        from .growth_budget import plan_for_growth

        plan = plan_for_growth(model, budget, exact=exact, budget_for=budget_for, pyops=default_pyops(budget_for))
    else:
        plan = plan_auto(model, budget, exact=exact)
    summary = plan.summary()
    if as_json:
        json.dump({**(report or {}), "auto": summary}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_plan(summary)
    if not plan.fits:
        print(f"onnxcomp inspect: error: {plan.failure_line()}", file=sys.stderr)
        return BudgetError.exit_code
    return 0
