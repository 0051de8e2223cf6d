"""What a training graph costs under ORT 1.19's default session settings: the process's growth over set-up.

`onnxcomp measure ... --arena --mem-pattern --mem-reuse --order default` reports ``growth_bytes``: the highest
VmHWM over the measured steps less the RSS after set-up. Under those settings that growth is made of (docs/notes:
patternblock.md, suitedef4.md parts 2-3, lossyvgg.md part 2, fewchunks.md):

1. **The training arena's pages first touched in a step.** ORT takes the memory-pattern block P
   (``ort_pattern.predict_pattern_block``) from the training session's BFC arena at the start of every step, and
   allocates from the same arena, outside P, every tensor without a static shape (ConvGrad's outputs, custom ops'
   undeclared outputs) and the kernels' scratch (ConvGrad's per-image im2col buffer and its bias row, Conv's
   expansion buffer, BiasGelu's). The arena (``BFCArena``, kNextPowerOfTwo) grows by regions whose size doubles,
   splits a chunk only when the rest is at least the request, coalesces freed neighbours, and serves a request
   from the best-fitting free chunk (the lower address on ties). At set-up ORT's ``Module`` has allocated one
   gradient buffer per parameter from it (``passes/grad_buffer_order.setup_free_chunks``), which leaves the free
   chunks step 0 starts with. ``simulate_arena`` replays that on a few steps and counts the pages each region gets
   written: this is where "2P" comes from (P fills a region of its own, a request outside P opens a second region
   of that size in step 0, step 1's block takes the lower of the two equal free regions: both resident).
2. **Heap**: ``NODE_BYTES`` per node kept from the first run (tools/ort_node_overhead.py), heapterm's per-PyOp
   small-block term per codec op, and around the PyOps
   of onnxcomp's codecs the bridge's copies (every input copied into a NumPy array, every output produced as one and
   copied into ORT's tensor) plus the payloads a ``"store"`` encoder keeps in Python until its decoder.
3. **A residue** (``RESIDUE_BYTES`` + ``RESIDUE_SHARE`` × P): what every graph adds beside the above (not
   identified), fitted on the suite's baselines and exact plans (docs/notes/growthplan.md).

``predict_growth`` returns the parts and their sum; ``GrowthModel`` holds the inputs of the arena replay so a
hand-written case can be checked without ORT (tests/test_ort_growth.py).
"""
from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

MIN_ALLOCATION = 256            # BFCArena::kMinAllocationSize: requests are rounded up to it
INITIAL_REGION = 1 << 20        # initial_chunk_size_bytes default
MAX_DEAD = 128 << 20            # max_dead_bytes_per_chunk default
PAGE = 4096
# Heap kept per graph node from the first run under ORT's defaults (reuse + pattern), tools/ort_node_overhead.py
# (362-437 B/node measured on 15k-45k-node chains); the planner's NODE_BYTES is the same figure.
NODE_BYTES = 370
# Heap a codec PyOp keeps touching per step beside its bridge copies (the extension's per-call Python objects and
# small NumPy blocks): heapterm's fitted per-PyOp coefficient of the step peak (planner/heap_term.COEFFICIENTS,
# 30.3 KB), the same figure here. Checked on the 52-graph growth validation (docs/notes/growthmiss.md): within 10 %
# 42 -> 51 graphs, largest error 16.2 -> 10.1 %; lossy mobilenet_v1_s (44-50 PyOps) -12.6...-16.2 % -> -2...-4 %.
def _pyop_bytes() -> int:
    from .heap_term import COEFFICIENTS

    return int(COEFFICIENTS["pyops"])
# Growth beside the arena and the heap parts above: RESIDUE_BYTES + RESIDUE_SHARE × P, fitted by eye on the six
# suite baselines and six `auto --exact` plans (measured residues 1.0-5.0 MiB, 0.08-0.12 × P on the baselines;
# docs/notes/growthplan.md). Not identified: ORT's per-run allocations that scale with the graph's tensors.
RESIDUE_BYTES = 1 << 20
RESIDUE_SHARE = 0.06
# MLAS's segmented im2col buffer (per thread 16K floats, two threads here): planner/auto.SEGMENTED_CONV_WORKSPACE.
SEGMENTED_CONV_WORKSPACE = 128 << 10
CODEC_DOMAIN = "ai.onnx.contrib"
# Payload a "store" encoder keeps in Python per byte of its input, by codec (the op type's suffix). Data-dependent
# codecs take their typical ratio: sparse (ZVC) on ReLU outputs keeps about half (mobilenet_v1_s's first encoder:
# 1.5 MiB in, 0.76 MiB held, docs/notes/suitedef4.md part 2).
STORE_RATIO = {"sparse": 0.5, "maxpool_index": 1 / 16, "bitmask": 1 / 32, "signbits": 1 / 32, "intervalmask": 1 / 32,
               "dpr_fp16": 0.5, "dpr_fp10": 0.3125, "dpr_fp8": 0.25}
DEFAULT_STORE_RATIO = 0.5


def rounded(n: int) -> int:
    """A request as the arena serves it."""
    return max(MIN_ALLOCATION, -(-int(n) // MIN_ALLOCATION) * MIN_ALLOCATION)


# ------------------------------------------------------------------------------------------------- arena
@dataclass
class _Chunk:
    start: int
    size: int
    free: bool = True


@dataclass
class _Region:
    address: int
    size: int
    chunks: list[_Chunk]
    touched: list[tuple[int, int]] = field(default_factory=list)   # [start, end) offsets written

    def touched_bytes(self) -> int:
        """Bytes of the pages written (whole pages: what RSS counts)."""
        return sum(b - a for a, b in _merged((a // PAGE * PAGE, -(-b // PAGE) * PAGE) for a, b in self.touched))


class Arena:
    """ORT 1.19's BFCArena (kNextPowerOfTwo), as far as growth goes: regions, best fit, split, coalesce."""

    def __init__(self) -> None:
        self.regions: list[_Region] = []
        self.grow = INITIAL_REGION
        self.low = 1 << 46              # regions are mmapped downwards: a newer region has a lower address
        self.live: dict[Any, tuple[_Region, _Chunk]] = {}
        self.log: list[tuple[str, int, int]] = []      # ("extend", request, region size)

    def _extend(self, need: int) -> _Region:
        increased = False
        while need > self.grow:
            self.grow *= 2
            increased = True
        size = self.grow
        if not increased:
            self.grow *= 2
        self.low -= size + PAGE
        region = _Region(self.low, size, [_Chunk(0, size)])
        self.regions.append(region)
        self.log.append(("extend", need, size))
        return region

    def alloc(self, key: Any, nbytes: int, touch: Sequence[tuple[int, int]] | None = None) -> None:
        """Allocate ``nbytes`` under ``key``; ``touch``: the offsets (within the request) written, default all."""
        need = rounded(nbytes)
        best: tuple[int, int, _Region, _Chunk] | None = None
        for r in self.regions:
            for c in r.chunks:
                if c.free and c.size >= need:
                    k = (c.size, r.address + c.start)
                    if best is None or k < best[:2]:
                        best = (*k, r, c)
        if best is None:
            region = self._extend(need)
            chunk = region.chunks[0]
        else:
            region, chunk = best[2], best[3]
        if chunk.size - need >= need or chunk.size - need >= MAX_DEAD:
            at = region.chunks.index(chunk)
            region.chunks.insert(at + 1, _Chunk(chunk.start + need, chunk.size - need))
            chunk.size = need
        chunk.free = False
        for a, b in (touch if touch is not None else [(0, int(nbytes))]):
            region.touched.append((chunk.start + a, chunk.start + min(b, chunk.size)))
        self.live[key] = (region, chunk)

    def free(self, key: Any) -> None:
        region, chunk = self.live.pop(key)
        chunk.free = True
        cs = region.chunks
        i = cs.index(chunk)
        if i + 1 < len(cs) and cs[i + 1].free:
            chunk.size += cs.pop(i + 1).size
        if i > 0 and cs[i - 1].free:
            cs[i - 1].size += chunk.size
            cs.pop(i)

    def resident(self) -> int:
        return sum(r.touched_bytes() for r in self.regions)


@dataclass
class StepEvent:
    """One allocation of a step outside the pattern: made before node ``at`` runs, freed after node ``until``
    (``until == at``: scratch, freed when the node ends)."""
    name: str
    nbytes: int
    at: int
    until: int


@dataclass
class GrowthModel:
    """The inputs of the arena replay: the set-up allocations (gradient buffers, in order), the pattern block's
    size and the offsets it writes, and the step's allocations outside it."""
    setup: list[int]
    pattern: int
    pattern_touched: list[tuple[int, int]] | None
    events: list[StepEvent]
    nodes: int = 0
    heap: int = 0                   # heap_peak of the graph, and where
    heap_at: str = ""
    pyops: int = 0                  # codec PyOps (each adds _pyop_bytes() of heap)
    resident: int = 0               # codec_resident_bytes: the codecs' cached tables, held from step 0 on

    def simulate(self, steps: int = 3) -> tuple[int, Arena]:
        """Bytes of the arena's pages written after set-up, over ``steps`` steps, and the arena."""
        arena = Arena()
        for k, size in enumerate(self.setup):
            arena.alloc(("setup", k), size)
        at_setup = arena.resident()
        by_at: dict[int, list[StepEvent]] = defaultdict(list)
        by_until: dict[int, list[StepEvent]] = defaultdict(list)
        for e in self.events:
            by_at[e.at].append(e)
            by_until[e.until].append(e)
        last = max([e.until for e in self.events] + [e.at for e in self.events] + [0])
        for s in range(steps):
            if self.pattern:
                arena.alloc(("P", s), self.pattern, self.pattern_touched)
            for i in range(last + 1):
                for e in by_at.get(i, ()):
                    arena.alloc((s, e.name), e.nbytes)
                for e in by_until.get(i, ()):
                    arena.free((s, e.name))
            if self.pattern:
                arena.free(("P", s))
        return arena.resident() - at_setup, arena


# ------------------------------------------------------------------------------------------------ graphs
def _shape_of(shapes: dict[str, Any], name: str) -> tuple[int, tuple[int, ...]] | None:
    s = shapes.get(name)
    if s is None or s[1] is None:
        return None
    return s


def _nbytes(s: tuple[int, tuple[int, ...]] | None) -> int:
    if s is None or s[0] in (0, onnx.TensorProto.STRING):
        return 0
    return int(np.prod(s[1], dtype=np.int64)) * int(onnx.helper.tensor_dtype_to_np_dtype(s[0]).itemsize)


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def conv_scratch(node: onnx.NodeProto, shapes: dict[str, Any]) -> list[int]:
    """The arena requests ORT 1.19's CPU kernel of ``node`` makes beside its outputs (bytes), per
    grad_buffer_order.largest_scratch and planner/auto.conv_workspace: ConvGrad's one-image im2col buffer
    (C/group·∏kernel·∏output floats) and its bias row (∏output floats, with or without dB); Conv's / FusedConv's expansion buffer
    (whole where a group's filters outnumber the output pixels, else MLAS's small segmented one; none for a 1×1
    stride-1 unpadded conv); ConvTranspose's col buffer (C_out/group·∏kernel·∏input pixels, one image, always);
    BiasGelu's / FastGelu's scratch of its input's size."""
    key = node.op_type
    if key == "ConvGrad":
        dy, w = _shape_of(shapes, node.input[0]), _shape_of(shapes, node.input[2]) if len(node.input) > 2 else None
        if dy is None or w is None or len(w[1]) < 3:
            return []
        pix = math.prod(dy[1][2:])
        # conv_grad.cc allocates the bias row (bias_multiplier, ∏output floats) right after the im2col buffer and
        # whether or not dB is an output. Counting it only with dB missed lossy densenet_s's "2P": a 460,800-B
        # im2col took the set-up's whole 630,784-B free chunk (the rest too small to split off), and the bias-free
        # ConvGrad's 1,600-B row opened a second 32 MiB region (docs/notes/lossyfloor.md §2; docs/notes/headroom.md).
        return [4 * math.prod(w[1][1:]) * pix, 4 * pix]
    if key in ("Conv", "FusedConv"):
        w = _shape_of(shapes, node.input[1]) if len(node.input) > 1 else None
        y = _shape_of(shapes, node.output[0])
        if w is None or y is None or len(w[1]) < 3:
            return []
        kernel = w[1][2:]
        strides = _attr(node, "strides", [1] * len(kernel))
        pads = _attr(node, "pads", [0] * 2 * len(kernel))
        if all(k == 1 for k in kernel) and all(s == 1 for s in strides) and not any(pads):
            return []
        full = 4 * math.prod(w[1][1:]) * math.prod(y[1][2:])
        filters = w[1][0] // max(1, int(_attr(node, "group", 1)))
        return [full if filters > math.prod(y[1][2:]) else min(full, SEGMENTED_CONV_WORKSPACE)]
    if key == "ConvTranspose":
        # conv_transpose.cc always allocates its col buffer: (C_out/group·∏kernel) × ∏(input spatial) floats, for
        # one image (onnxcomp's chunked graphs compute input gradients with it: a chunk's dX of a 64-channel 3×3
        # conv at 40×40 asks 3.5 MiB, where Conv's segmented buffer for the same shapes asks 128 KiB).
        x = _shape_of(shapes, node.input[0])
        w = _shape_of(shapes, node.input[1]) if len(node.input) > 1 else None
        if x is None or w is None or len(w[1]) < 3 or len(x[1]) < 3:
            return []
        return [4 * math.prod(w[1][1:]) * math.prod(x[1][2:])]
    if key in ("BiasGelu", "FastGelu") and node.domain == "com.microsoft" and len(node.input) > 1:
        return [_nbytes(_shape_of(shapes, node.input[0]))]
    return []


def _full_shapes(original: onnx.ModelProto) -> dict[str, Any]:
    """Every tensor's shape onnxcomp's analysis knows (sizes of what ORT allocates outside the pattern)."""
    from .ort_pattern import _declared

    out = dict(_declared(original))
    try:
        from ..analysis import analyze_model

        for name, t in analyze_model(original).tensors.items():
            known = name in out and out[name][1] is not None
            if not known and t.type.shape is not None and all(isinstance(d, int) for d in t.type.shape):
                out[name] = (onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.type.dtype)),
                             tuple(int(d) for d in t.type.shape))
    except Exception as exc:   # noqa: BLE001  (not a training graph the analysis knows: the declared shapes only)
        logging.getLogger(__name__).debug("growth model: analysis failed (%s); declared shapes only", exc)
    return out


def _dynamic_size(node: onnx.NodeProto, k: int, full: dict[str, Any]) -> int:
    """Bytes of output ``k`` of ``node`` where ORT has no static shape for it."""
    y = node.output[k]
    s = _shape_of(full, y)
    if s is not None:
        return _nbytes(s)
    if node.op_type == "ConvGrad":     # dX like X, dW like W, dB one per filter
        src = {0: node.input[1], 1: node.input[2]}.get(k)
        if src is not None:
            return _nbytes(_shape_of(full, src))
        w = _shape_of(full, node.input[2])
        return 4 * w[1][0] if w is not None else 0
    return 0


def gradient_buffer_sizes(model: onnx.ModelProto, reorder: bool = False,
                          full: dict[str, Any] | None = None) -> list[int]:
    """Bytes of the gradient accumulation buffers ORT's Module allocates at set-up, in parameter order; with
    ``reorder`` in the order ``passes/grad_buffer_order`` would give them (what `transform` writes into an
    artifact directory)."""
    from ..passes.grad_buffer_order import ACCUMULATION_SUFFIX, MARGIN, choose_order

    names = {i.name for i in model.graph.input}
    sizes = []
    for vi in model.graph.input:
        if vi.name + ACCUMULATION_SUFFIX not in names:
            continue
        t = vi.type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        sizes.append(int(np.prod(dims, dtype=np.int64)) * int(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize))
    if reorder and len(sizes) > 1:
        full = _full_shapes(model) if full is None else full
        scratch = max((x for n in model.graph.node if n.op_type in ("Conv", "ConvGrad")
                       for x in conv_scratch(n, full)[:1]), default=0)
        if scratch:
            order = choose_order(sizes, 2 * scratch, target=MARGIN * scratch)
            if order is not None:
                sizes = [sizes[i] for i in order]
    return sizes


def _codec(op_type: str) -> str:
    for prefix in ("OnnxcompEncode_", "OnnxcompDecode_"):
        if op_type.startswith(prefix):
            return op_type[len(prefix):]
    return op_type


def _params(node: onnx.NodeProto) -> dict[str, Any]:
    raw = _attr(node, "params", b"")
    try:
        return json.loads(raw.decode() if isinstance(raw, bytes) else raw) if raw else {}
    except ValueError:
        return {}


def codec_run_bytes(node: onnx.NodeProto, full: dict[str, Any]) -> int:
    """Heap a codec PyOp holds while it runs, as the step-peak planner prices it (``planner/predict.
    _codec_workspace``: the bridge's copy of its inputs plus the codec's own NumPy arrays, temporaries included,
    measured once per op, params and shape under tracemalloc); 0 where the tensor's shape is unknown. The
    temporaries are most of it for the NumPy codecs: MobileNetV2's ReLU6 ``intervalmask`` encoder of a 12 MiB
    tensor holds its bridge copy plus ~9 MiB of boolean arrays (``x >= lo``, ``x <= hi``, their ``and``), where
    the step's high-water mark sat (docs/notes/growthmiss.md; the old sum of inputs and outputs missed them)."""
    from ..custom_ops.contract import DECODE_PREFIX, ENCODE_PREFIX
    from .predict import _codec_workspace

    if node.op_type.startswith(ENCODE_PREFIX):
        direction, name, t = "encode", node.op_type[len(ENCODE_PREFIX):], node.input[0] if node.input else ""
    elif node.op_type.startswith(DECODE_PREFIX):
        direction, name, t = "decode", node.op_type[len(DECODE_PREFIX):], node.output[0] if node.output else ""
    else:
        return 0
    raw = _attr(node, "params", b"")
    params = raw.decode() if isinstance(raw, bytes) else (raw or "{}")
    s = _shape_of(full, t) or _shape_of(full, str(_params(node).get("tensor", "")))
    if s is None or any(not isinstance(d, int) or d < 0 for d in s[1]):
        return 0
    return int(_codec_workspace(direction, name, params or "{}", tuple(int(d) for d in s[1])))


def _codec_modules(names: Iterable[str]) -> list[Any]:
    """The Python modules that implement the codecs ``names`` (where their per-process caches live)."""
    import sys

    from ..custom_ops import REGISTRY

    mods = {}
    for name in names:
        codec = REGISTRY.get(name)
        if codec is not None:
            for m in {type(codec).__module__, getattr(codec.encode_cpu, "__module__", None)} - {None}:
                if m in sys.modules:
                    mods[m] = sys.modules[m]
    return list(mods.values())


def _clear_codec_caches(modules: Iterable[Any]) -> None:
    """Empty every ``functools`` cache at module level of ``modules``: the state a fresh training process has."""
    for mod in modules:
        for obj in list(vars(mod).values()):
            if callable(getattr(obj, "cache_clear", None)):
                obj.cache_clear()


TABLE_MIN_BLOCK = 4096         # codec_resident_bytes counts blocks this large (the tables are NumPy arrays)
_RESIDENT: dict[frozenset[tuple[str, str, str, tuple[int, ...]]], int] = {}


def codec_resident_bytes(nodes: Sequence[onnx.NodeProto], full: dict[str, Any]) -> int:
    """Heap the graph's codecs keep for the rest of the process once each op has run (bytes): tables a codec
    builds on its first call and caches per geometry, e.g. the MaxPool-index codec's NumPy lookup tables (~512 KiB
    per distinct pool geometry: ``base``, 64K int64 window origins). They are filled in the first training step,
    after set-up, so they are growth, and they stay resident: measured on lossy squeezenet_s under ORT's defaults
    (docs/notes/budgetguard.md: 1.0 MiB of NumPy arrays allocated in step 0 and alive after step 3, two pool
    geometries), which the step-peak planner's workspace figure leaves out on purpose (it warms the codec up
    first). Measured, not tabled, in a child process (a fresh process's caches, and the planner's own caches left
    as they are): ``measure_codec_resident`` of the graph's distinct (direction, codec, params, shape) keys; one
    figure per set of keys, cached."""
    from ..custom_ops.contract import DECODE_PREFIX, ENCODE_PREFIX

    keys = set()
    for n in nodes:
        if n.domain != CODEC_DOMAIN:
            continue
        if n.op_type.startswith(ENCODE_PREFIX):
            direction, name, t = "encode", n.op_type[len(ENCODE_PREFIX):], n.input[0] if n.input else ""
        elif n.op_type.startswith(DECODE_PREFIX):
            direction, name, t = "decode", n.op_type[len(DECODE_PREFIX):], n.output[0] if n.output else ""
        else:
            continue
        raw = _attr(n, "params", b"")
        params = (raw.decode() if isinstance(raw, bytes) else raw) or "{}"
        s = _shape_of(full, t) or _shape_of(full, str(_params(n).get("tensor", "")))
        if s is None or any(not isinstance(d, int) or d < 0 for d in s[1]):
            continue
        keys.add((direction, name, params, tuple(int(d) for d in s[1])))
    if not keys:
        return 0
    key = frozenset(keys)
    if key not in _RESIDENT:
        _RESIDENT[key] = _resident_in_child(sorted(keys))
    return _RESIDENT[key]


def _resident_in_child(keys: list[tuple[str, str, str, tuple[int, ...]]]) -> int:
    """``measure_codec_resident(keys)`` in a fresh Python process (this process's state where that fails)."""
    import subprocess
    import sys

    code = ("import json, sys; from onnxcomp.planner.ort_growth import measure_codec_resident as m; "
            "print(m([(d, n, p, tuple(s)) for d, n, p, s in json.load(sys.stdin)]))")
    try:
        done = subprocess.run([sys.executable, "-c", code], input=json.dumps(keys), capture_output=True, text=True,
                              timeout=600, check=True)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        logging.getLogger(__name__).debug("codec tables: child failed (%s); measured in this process", exc)
        return measure_codec_resident(keys)


def measure_codec_resident(keys: Iterable[tuple[str, str, str, tuple[int, ...]]]) -> int:
    """Bytes the codecs keep allocated after running each key (direction, codec, params, shape) once on synthetic
    data of its shape, from emptied module-level caches (tracemalloc). A first pass imports and compiles what the
    codecs need (a training process does that at set-up, before its first step) and is not counted. Empties the
    codecs' ``functools`` caches of this process: call it where that does not matter (``_resident_in_child``)."""
    import tracemalloc

    from ..custom_ops import REGISTRY
    from ..custom_ops.contract import CONTROL_PARAMS, parse_params

    keys = sorted(keys)

    def run_all() -> None:
        for direction, name, params, shape in keys:
            codec = REGISTRY.get(name)
            if codec is None:
                continue
            codec_params = {k: v for k, v in parse_params(params).items() if k not in CONTROL_PARAMS}
            x = np.maximum(np.random.default_rng(0).standard_normal(shape, dtype=np.float32), 0)
            x = x.astype(np.dtype(codec.input_dtype), copy=False)
            try:
                payload = codec.encode_cpu(x, **codec_params)
                if direction == "decode":
                    out = codec.decode_cpu(tuple(np.ascontiguousarray(p) for p in payload), **codec_params)
                    del out
            except Exception:  # noqa: BLE001  (a codec that needs run-time state: no table figure for it)
                pass
            payload = x = None

    run_all()
    _clear_codec_caches(_codec_modules({k[1] for k in keys}))
    was_tracing = tracemalloc.is_tracing()
    if was_tracing:
        tracemalloc.stop()
    # Traced from here only: what is still allocated at the end was allocated by the second pass. Only blocks of
    # TABLE_MIN_BLOCK or more count: small Python objects vary by a few hundred bytes from one process to the next,
    # and a figure that moves makes `inspect`'s tightest budget one a later `transform` cannot meet (seen on lossy
    # densenet_s: "lowest predicted 46.6 MiB, must predict ≤ 46.6 MiB").
    tracemalloc.start()
    try:
        run_all()
        held = sum(t.size for t in tracemalloc.take_snapshot().traces if t.size >= TABLE_MIN_BLOCK)
    finally:
        tracemalloc.stop()
        if was_tracing:
            tracemalloc.start()
    return int(held)


def heap_peak(nodes: Sequence[onnx.NodeProto], full: dict[str, Any],
              run_bytes: Any = codec_run_bytes) -> tuple[int, str]:
    """The largest heap the codec PyOps hold at once (bytes) and the node where: what a PyOp holds while it runs
    (the larger of the bridge's copies of its inputs and outputs and ``run_bytes(node, full)``, by default
    ``codec_run_bytes``: bridge copy plus the codec's NumPy temporaries), plus the payloads ``"store"`` encoders
    keep until their decoders."""
    held: dict[str, int] = {}
    best, where = 0, ""
    for n in nodes:
        if n.domain != CODEC_DOMAIN:
            continue
        p = _params(n)
        ins = sum(_nbytes(_shape_of(full, x)) for x in n.input if x)
        outs = sum(_nbytes(_shape_of(full, y)) for y in n.output if y)
        tensor = p.get("tensor", n.output[0] if n.output else "")
        store = bool(p.get("store"))
        now = sum(held.values()) + max(ins + outs, run_bytes(n, full) if run_bytes is not None else 0)
        if now > best:
            best, where = now, n.name or n.op_type
        if store and n.op_type.startswith("OnnxcompEncode_"):
            # fixed-rate codecs (zfp) keep rate bits per 32-bit value
            ratio = float(p["rate"]) / 32 if "rate" in p else STORE_RATIO.get(_codec(n.op_type), DEFAULT_STORE_RATIO)
            held[tensor] = int(ins * ratio)
        elif store and n.op_type.startswith("OnnxcompDecode_"):
            held.pop(tensor, None)
    return best, where


@dataclass
class GrowthPrediction:
    """Predicted ORT-defaults growth (bytes) and its parts."""
    total: int
    pattern: int
    arena: int
    pattern_copies: int
    outside_requests: int
    largest_outside: int
    nodes: int
    node_bytes: int
    heap: int
    heap_at: str
    residue: int
    regions: list[int]
    spacers: list[int] = field(default_factory=list)    # passes/arena_spacer sizes this prediction assumes
    # What those spacers hold at set-up (parameter, gradient buffer, Adam moments), counted in ``total``: moving
    # bytes out of the growth into the set-up is not a saving, so the budget sees them.
    spacer_set_up: int = 0
    pyops: int = 0                  # codec PyOps in the graph
    codec_tables: int = 0           # GrowthModel.resident: the codecs' tables cached from the first step on

    def to_dict(self) -> dict[str, Any]:
        return {"growth_bytes": self.total, "pattern_bytes": self.pattern, "arena_bytes": self.arena,
                "pattern_copies": self.pattern_copies, "outside_requests": self.outside_requests,
                "largest_outside_bytes": self.largest_outside, "nodes": self.nodes, "node_bytes": self.node_bytes,
                "heap_bytes": self.heap, "heap_at": self.heap_at, "residue_bytes": self.residue,
                "arena_regions": self.regions, "spacers": self.spacers, "spacer_set_up_bytes": self.spacer_set_up,
                "pyops": self.pyops, "codec_table_bytes": self.codec_tables}


def growth_model(optimized: onnx.ModelProto, original: onnx.ModelProto, reorder: bool = False) -> GrowthModel:
    """The arena replay's inputs for ``original`` (the graph given to ORT) and ``optimized`` (ORT's optimised
    graph in its DEFAULT order, ``ort_pattern.ort_optimized_model``)."""
    from .ort_pattern import allocation_plan, ort_static_shapes, pattern_block

    shapes = ort_static_shapes(optimized, original)
    plan = allocation_plan(optimized, shapes)
    block = pattern_block(plan)
    from .ort_pattern import _declared

    full = _full_shapes(original)
    full.update({k: v for k, v in _declared(optimized).items() if v[1] is not None and k not in full})
    events: list[StepEvent] = []
    dynamic = set(block.dynamic)
    merged = {**full, **{k: v for k, v in shapes.items() if v[1] is not None}}
    for step, node in enumerate(plan.nodes):
        for k, y in enumerate(node.output):
            if y in dynamic:
                events.append(StepEvent(y, _dynamic_size(node, k, full), step, plan.end.get(y, step)))
        for j, size in enumerate(conv_scratch(node, merged)):
            if size:
                events.append(StepEvent(f"{node.name or step}/scratch{j}", size, step, step))
    events = [e for e in events if e.nbytes > 0]
    touched = [(off, off + size) for off, size in block.offsets.values()]
    heap, at = heap_peak(list(original.graph.node), full)
    return GrowthModel(gradient_buffer_sizes(original, reorder, full), block.size, touched, events,
                       nodes=len(original.graph.node), heap=heap, heap_at=at,
                       pyops=sum(1 for n in original.graph.node if n.domain == CODEC_DOMAIN),
                       resident=codec_resident_bytes(list(original.graph.node), full))


def predict_growth_of(model: onnx.ModelProto, reorder: bool = False, steps: int = 3,
                      spacers: bool = False) -> GrowthPrediction:
    """``predict_growth`` for a graph in memory (initializers inline). ``spacers``: also price the graph with
    passes/arena_spacer's spacer parameters and return that prediction (``.spacers`` set) where its saving exceeds
    their set-up cost (``with_spacers``)."""
    from .ort_pattern import ort_optimized_model_of

    gm = growth_model(ort_optimized_model_of(model), model, reorder)
    plain = _predict(gm, steps)
    return with_spacers(gm, plain, steps) if spacers else plain


# Set-up RSS a transform adds per node of the written graph over the untouched graph's (ORT's session state,
# kernels and optimised graph per node; what `measure` reads as ``rss_setup_bytes``, process against process).
# Fitted (least squares through 0) on 8 suite plans without codec PyOps or spacers (5 exact, 3 lossy; +76 to +3,004
# nodes; docs/notes/setupfree.md, budgetguard's measurements): 4.9-9.3 KB per node each, 5.5 KB fitted (exact plans
# alone: 6.7 KB). The spacers' set-up (``spacer_set_up``) comes on top.
SET_UP_NODE_BYTES = 5500


def set_up_added_bytes(p: "GrowthPrediction", base_nodes: int) -> int:
    """Set-up RSS the graph behind ``p`` adds over an untouched graph of ``base_nodes`` nodes: what its spacers
    hold at set-up plus ``SET_UP_NODE_BYTES`` per added node. Not counted: the codec modules a graph with PyOps
    imports at set-up (one-off, codec-dependent: 1-5 MiB measured on lossy suite plans); `--verify` measures it."""
    return p.spacer_set_up + SET_UP_NODE_BYTES * max(0, p.nodes - int(base_nodes))


# Room asked of the spacers beside the largest request outside the pattern (ConvGrad's bias row is taken while
# its im2col buffer is held).
SPACER_ROOM = 64 << 10


def with_spacers(gm: GrowthModel, plain: GrowthPrediction, steps: int = 3) -> GrowthPrediction:
    """``plain``, or the prediction with spacer parameters (passes/arena_spacer.spacer_sizes for the largest
    request outside the pattern) where the growth they save exceeds what they hold at set-up
    (``SET_UP_COPIES`` × their bytes). The spaced prediction's ``total`` includes that set-up cost: growth plus the
    set-up bytes the spacers add is what the process holds beyond the untouched graph's set-up."""
    from dataclasses import replace

    from ..passes.arena_spacer import SET_UP_COPIES, spacer_sizes

    if plain.pattern_copies < 2 or not gm.events:
        return plain
    sizes = spacer_sizes(gm.setup, max(e.nbytes for e in gm.events) + SPACER_ROOM)
    if not sizes:
        return plain
    spaced = GrowthModel([*gm.setup, *sizes], gm.pattern, gm.pattern_touched, gm.events, gm.nodes + 2 * len(sizes),
                         gm.heap, gm.heap_at, gm.pyops, gm.resident)
    p = _predict(spaced, steps)
    set_up = SET_UP_COPIES * sum(sizes)
    if p.total + set_up >= plain.total:
        return plain
    return replace(p, total=p.total + set_up, spacers=sizes, spacer_set_up=set_up)


def predict_growth(model_path: str | os.PathLike[str], reorder: bool = False, steps: int = 3) -> GrowthPrediction:
    """Predicted growth over set-up under ORT's defaults for the training graph at ``model_path`` (one ORT session
    set-up, nothing runs). ``reorder``: as `transform` would write it into an artifact directory (parameter order
    of passes/grad_buffer_order)."""
    from .ort_pattern import ort_optimized_model

    original = onnx.load(str(model_path), load_external_data=False)
    optimized = ort_optimized_model(model_path)
    gm = growth_model(optimized, original, reorder)
    return _predict(gm, steps)


def _predict(gm: GrowthModel, steps: int = 3) -> GrowthPrediction:
    arena_bytes, arena = gm.simulate(steps)
    step_regions = [size for kind, _, size in arena.log][len(_setup_regions(gm.setup)):]
    copies = sum(1 for r in arena.regions if r.size >= gm.pattern > 0 and
                 any(b - a >= gm.pattern // 2 for a, b in _merged(r.touched)))
    heap, at = gm.heap, gm.heap_at
    node_bytes = NODE_BYTES * gm.nodes + _pyop_bytes() * gm.pyops     # per-node and per-PyOp small blocks
    residue = RESIDUE_BYTES + int(RESIDUE_SHARE * gm.pattern)
    total = arena_bytes + node_bytes + heap + residue + gm.resident
    return GrowthPrediction(total, gm.pattern, arena_bytes, copies, len(gm.events),
                            max((e.nbytes for e in gm.events), default=0), gm.nodes, node_bytes, heap, at,
                            residue, step_regions, pyops=gm.pyops, codec_tables=gm.resident)


def _setup_regions(setup: Iterable[int]) -> list[int]:
    a = Arena()
    for k, s in enumerate(setup):
        a.alloc(k, s)
    return [size for _, _, size in a.log]


def _merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]
