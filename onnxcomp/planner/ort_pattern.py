"""ORT 1.19's memory-pattern block P under its default session settings, predicted by replaying ORT's planners.

With ORT's defaults (arena, memory pattern, buffer reuse, DEFAULT order) a training step allocates one block of P
bytes at its start and places every tensor with a static shape at a fixed offset in it; the process's growth is
P (2P when the arena opens a second region for it, tools/arena_regions.py) plus what is allocated outside it.
P is neither the live peak nor the replayed reuse peak (``ort_reuse.py``): it is the extent of ORT's own layout.
This module replays, on the graph ORT actually runs, what ORT does (onnxruntime 1.19, read from
core/framework/allocation_planner.cc, session_state.cc ``GeneratePatternGroupCache`` and mem_pattern_planner.h):

1. **The graph ORT runs** is its optimised graph (level ALL: Conv+Relu → FusedConv, NCHWc layout with
   ReorderInput/ReorderOutput, Slice → Split, constant folding), in ORT's DEFAULT execution order (rebuilt from
   the file ORT writes, whose own node order is not always the run order; checked against ORT's profiling
   trace). ``ort_optimized_model`` asks ORT for it.
2. **Static shapes** are ORT's NodeArg shapes: those it writes into the optimised graph, plus those its shape
   inference knows but does not write (taken from onnxcomp's shape analysis of the original graph), minus the
   outputs of ops without shape inference (``NO_STATIC_SHAPE``: ConvGrad; custom PyOps unless declared). A tensor
   without a static shape is allocated on its own at run time, outside P.
3. **Reuse plan** (``ComputeSingleStreamReusePlan``): for each node in order and each output: a graph output is
   the caller's; an alias output (``ALIAS``: Reshape, Identity, ..., InPlaceAccumulatorV2's buffer) shares its
   input; an in-place output (``MAY_INPLACE``) shares its input when that input's buffer has one use left and the
   same element size and shape; otherwise the most recently freed buffer whose first tensor has the same element
   size and shape; otherwise a new buffer. Use counts count every read, every production and each graph input,
   initializer and output once more; a buffer is freed when its count reaches zero.
4. **Lifetimes**: a buffer is one interval from its first tensor's production to the last read of any tensor
   sharing it (``GenerateDeallocationPlan`` releases a buffer once, after its last consumer); a buffer nobody reads
   lives to the end of the step, and is never given to a later tensor.
5. **Layout** (``MemPatternPlanner::TraceAllocation`` with program counters): buffers in production order, each at
   the best-fitting gap (least waste) among the blocks whose intervals overlap its own, or the stretch above the
   highest one, else at the end; sizes rounded up to 256 bytes (``ALIGN``).

Measured against P read from the step's own allocation (the CPU arena off, so P is one aligned allocation at the
step's start; docs/notes/patternblock.md, docs/notes/finalgate.md, docs/notes/growthmiss.md): byte-exact on 24
of 26 graphs (6 suite baselines, 6 ``auto --exact`` plans, 10 lossy plans, MobileNetV2's growth-mode plans). Not
explained: an older MobileNetV2 step-mode ``auto --exact`` plan (+8.9 %) and the MobileNetV2 baseline (+0.16 %).
The tables below are ORT's kernel registrations where a measurement showed they matter (removing Relu's in-place
entry breaks 9 of the 18 graphs; without InPlaceAccumulatorV2's alias the row-split lossy plain_deep read +90 %;
without Cast's in-place entry lossy densenet_s read +27 %).
"""
from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

log = logging.getLogger(__name__)

# kAllocAlignment (core/framework/allocator.h): MemPatternPlanner is given every planned size rounded up to 256 bytes
# (session_state.cc, CalcMemSizeForArrayWithAlignment<kAllocAlignment>). Measured (docs/notes/growthmiss.md): the
# offset of every codec PyOp input found inside ORT's block equals the replay's with 256 (MobileNetV2's growth-mode
# plan, 78 inputs; mobilenet_v1_s lossy, 37) and is off by 448-3,000 B with 64; with 256, 17 of 24 graphs predict
# P to the byte (64: 0), exact squeezenet_s −11.66 % → 0.00 %. Small tensors (BatchNorm's saved mean / inv-std,
# encoders' shape anchors, per-layer bias gradients) are what moves: each takes 256 bytes, not 64, and the shifted
# gaps change later best-fit choices.
ALIGN = 256

# (input, output) pairs a kernel aliases: the output is the input's buffer (CPU kernels' KernelDef Alias()).
ALIAS: dict[tuple[str, str], tuple[tuple[int, int], ...]] = {
    ("Reshape", ""): ((0, 0),), ("Identity", ""): ((0, 0),), ("Squeeze", ""): ((0, 0),),
    ("Unsqueeze", ""): ((0, 0),), ("Flatten", ""): ((0, 0),),
    ("InPlaceAccumulatorV2", "com.microsoft"): ((0, 1),), ("InPlaceAccumulator", "com.microsoft"): ((0, 0),),
    ("BatchNormInternal", "com.microsoft"): ((3, 1), (4, 2)),   # running mean / variance updated in place
}
# (input, output) pairs a kernel may compute in place (KernelDef MayInplace()): the unary activations, Cast and
# Clip. Cast: cast_op.cc, "allocation planner will check input and output sizes match before inplacing", so a
# bool → uint8 Cast writes over its input (lossy densenet_s's sign-bit Casts: P +27 % without it). Cast and Clip
# were measured in place on a two-node graph; Neg, Sqrt, Abs, Exp, Floor, Reciprocal, Add, Sub, Mul, Div, Sum and
# ReluGrad were not (docs/notes/finalgate.md).
MAY_INPLACE: dict[tuple[str, str], tuple[tuple[int, int], ...]] = {
    (op, ""): ((0, 0),) for op in ("Elu", "HardSigmoid", "LeakyRelu", "Relu", "Selu", "Sigmoid", "Softplus",
                                   "Softsign", "Tanh", "ThresholdedRelu", "Cast", "Clip")
}
# Ops whose outputs ORT's shape inference leaves without a shape (measured: ConvGrad's dX/dW/dB are allocated on
# their own at run time unless the graph declares their shapes).
NO_STATIC_SHAPE = {("ConvGrad", "com.microsoft")}
CUSTOM_DOMAINS = {"ai.onnx.contrib"}    # onnxruntime-extensions PyOps: no shape inference

Shape = tuple[int, tuple[int, ...] | None]    # (ONNX element type, static shape or None)


def nchwc_block_size() -> int:
    """MLAS's NCHWc channel block: 16 with AVX-512F, 8 otherwise (AVX2); channels are padded up to it."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 8
    return 16 if " avx512f" in flags else 8


def ort_optimized_model(model_path: str | os.PathLike[str], session_options: Any = None) -> onnx.ModelProto:
    """The graph ORT runs: ``model_path`` after ORT's graph optimisations under ``session_options`` (default:
    ORT's defaults with onnxcomp's codec ops registered), in ORT's DEFAULT execution order.

    Uses an inference session of the training build (the training Module optimises the same way: identical node
    lists were checked on two lossy graphs); nothing runs, so this costs a session's set-up."""
    import tempfile

    import onnxruntime as ort

    if session_options is None:
        from ..runtime.session import RuntimeSettings

        session_options = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True,
                                          execution_order="default").session_options()
    with tempfile.TemporaryDirectory(prefix="onnxcomp_ortopt_") as tmp:
        out = Path(tmp) / "optimized.onnx"
        session_options.optimized_model_filepath = str(out)
        # ORT warns on every such set-up that an NCHWc-optimised file is machine-specific: we only read it here
        session_options.log_severity_level = 3
        ort.InferenceSession(str(model_path), session_options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(str(out), load_external_data=False)
    return _in_default_order(optimized, onnx.load(str(model_path), load_external_data=False))


def _in_default_order(optimized: onnx.ModelProto, original: onnx.ModelProto) -> onnx.ModelProto:
    """``optimized`` with its nodes in ORT's DEFAULT execution order.

    ORT writes the optimised graph in another topological order (a two-branch graph came out branch by branch in
    list order, while ORT's profiling trace ran the second branch first), and DEFAULT depends on ORT's node
    indices, which the file does not keep. They are rebuilt: a node of the original graph (same op type and
    outputs) keeps its position there; a node ORT made gets the next free index, in file order. Then ORT's
    reverse depth-first walk (graph_viewer.cc, as analysis/execution_order.py): leaves by index, the
    highest-indexed walked first, a node's inputs pushed by ascending index, post-order. Checked against ORT's
    profiling trace on that graph and on five suite graphs (85 to 4604 nodes)."""
    index = {(n.op_type, tuple(n.output)): i for i, n in enumerate(original.graph.node)}
    nodes = list(optimized.graph.node)
    fresh = len(original.graph.node)
    ids = []
    for n in nodes:
        k = index.get((n.op_type, tuple(n.output)))
        if k is None:
            k, fresh = fresh, fresh + 1
        ids.append(k)
    made = {o: p for p, n in enumerate(nodes) for o in n.output if o}
    inputs = {p: sorted({made[x] for x in n.input if x in made}, key=ids.__getitem__) for p, n in enumerate(nodes)}
    read = {q for qs in inputs.values() for q in qs}
    stack = [(p, False) for p in sorted((p for p in range(len(nodes)) if p not in read), key=ids.__getitem__)]
    seen: set[int] = set()
    order: list[int] = []
    while stack:
        p, leave = stack.pop()
        if leave:
            order.append(p)
        elif p not in seen:
            seen.add(p)
            stack.append((p, True))
            stack.extend((q, False) for q in inputs[p])
    out = onnx.ModelProto()
    out.CopyFrom(optimized)
    del out.graph.node[:]
    out.graph.node.extend(nodes[p] for p in order)
    return out


def _declared(model: onnx.ModelProto) -> dict[str, Shape]:
    out: dict[str, Shape] = {}
    g = model.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        if not vi.type.HasField("tensor_type"):
            continue
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            out[vi.name] = (t.elem_type, None)
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        out[vi.name] = (t.elem_type, None if None in dims else tuple(dims))
    for init in g.initializer:
        out[init.name] = (init.data_type, tuple(init.dims))
    return out


def _nchwc_shape(node: onnx.NodeProto, shapes: Mapping[str, Shape], block: int) -> tuple[int, ...] | None:
    """Output shape of an NCHWc op (com.microsoft.nchwc), as ORT's NCHWc schemas infer it."""
    x = shapes.get(node.input[0]) if node.input else None
    if x is None or x[1] is None or len(x[1]) != 4:
        return None
    n, c, h, w = x[1]
    pad = -(-c // block) * block
    at = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "ReorderInput":
        return (n, pad, h, w)
    if node.op_type in ("GlobalAveragePool", "GlobalMaxPool"):
        return (n, c, 1, 1)
    if node.op_type not in ("MaxPool", "AveragePool", "Conv"):
        return None
    if node.op_type == "Conv":
        wt = shapes.get(node.input[1])
        if wt is None or wt[1] is None:
            return None
        kernel, c = list(at.get("kernel_shape") or wt[1][2:]), -(-wt[1][0] // block) * block
    else:
        kernel = list(at["kernel_shape"])
    strides, dil = at.get("strides", [1, 1]), at.get("dilations", [1, 1])
    pads = at.get("pads", [0, 0, 0, 0])
    div = (lambda a, b: -(-a // b)) if at.get("ceil_mode", 0) else (lambda a, b: a // b)
    ho = div(h + pads[0] + pads[2] - ((kernel[0] - 1) * dil[0] + 1), strides[0]) + 1
    wo = div(w + pads[1] + pads[3] - ((kernel[1] - 1) * dil[1] + 1), strides[1]) + 1
    return (n, c, ho, wo)


def ort_static_shapes(optimized: onnx.ModelProto, original: onnx.ModelProto | None = None,
                      block: int | None = None) -> dict[str, Shape]:
    """Each tensor's static shape as ORT's planner sees it (module docstring, item 2). ``original``: the graph
    given to ORT, whose onnxcomp shape analysis supplies the shapes ORT infers but does not write out."""
    shapes = _declared(optimized)
    inferred: dict[str, Shape] = {}
    if original is not None:
        from ..analysis import analyze_model
        from ..errors import OnnxcompError

        try:
            tensors = analyze_model(original).tensors
        except OnnxcompError:       # not a training graph: ONNX's own inference knows its standard ops
            inferred = _declared(onnx.shape_inference.infer_shapes(original))
        else:
            for name, t in tensors.items():
                if t.type.shape is not None and t.size_hint is None:
                    inferred[name] = (onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.type.dtype)),
                                      tuple(int(d) for d in t.type.shape))
    block = nchwc_block_size() if block is None else block
    for node in optimized.graph.node:
        for y in node.output:
            if not y or (y in shapes and shapes[y][1] is not None):
                continue
            if node.domain in CUSTOM_DOMAINS or (node.op_type, node.domain) in NO_STATIC_SHAPE:
                continue
            if node.domain == "com.microsoft.nchwc":
                s = _nchwc_shape(node, shapes, block)
                if s is not None:
                    shapes[y] = (onnx.TensorProto.FLOAT, s)
            elif y in inferred:
                shapes[y] = inferred[y]
    return shapes


def _itemsize(elem_type: int) -> int:
    return int(onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)


@dataclass
class OrtPlan:
    """ORT's allocation plan of a graph: per value, its kind ("alloc", "reuse", "alias", "inplace", "output",
    "input") and the value whose buffer it uses; per allocated buffer, its interval of node steps."""
    nodes: list[onnx.NodeProto]
    shapes: dict[str, Shape]
    kind: dict[str, str] = field(default_factory=dict)
    buffer: dict[str, str] = field(default_factory=dict)
    start: dict[str, int] = field(default_factory=dict)
    end: dict[str, int] = field(default_factory=dict)

    def nbytes(self, name: str) -> int:
        """Planned bytes of ``name`` (rounded up to ALIGN); 0 without a static shape."""
        s = self.shapes.get(name)
        if s is None or s[1] is None or s[0] in (0, onnx.TensorProto.STRING):
            return 0
        raw = int(np.prod(s[1], dtype=np.int64)) * _itemsize(s[0])
        return -(-raw // ALIGN) * ALIGN


def allocation_plan(model: onnx.ModelProto, shapes: Mapping[str, Shape],
                    alias: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = ALIAS,
                    may_inplace: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = MAY_INPLACE) -> OrtPlan:
    """ORT's buffer-reuse plan of ``model`` (nodes in the order given; module docstring, items 3-4)."""
    g = model.graph
    plan = OrtPlan(list(g.node), dict(shapes))
    pre = {i.name for i in g.input} | {t.name for t in g.initializer}
    outputs = {o.name for o in g.output}
    use: dict[str, int] = defaultdict(int)
    for name in pre | outputs:
        use[name] += 1
    for node in plan.nodes:
        for name in [*node.input, *node.output]:
            if name:
                use[name] += 1
    for name in pre:
        plan.buffer[name], plan.kind[name] = name, "input"

    def same_size(a: str, b: str) -> bool:
        sa, sb = plan.shapes.get(a), plan.shapes.get(b)
        if sa is None or sb is None or sa[1] is None or sb[1] is None:
            return False
        if onnx.TensorProto.STRING in (sa[0], sb[0]) or 0 in (sa[0], sb[0]):
            return False
        return _itemsize(sa[0]) == _itemsize(sb[0]) and sa[1] == sb[1]

    def share(reused: str, value: str, kind: str) -> None:
        original = plan.buffer[reused]
        plan.buffer[value] = original
        use[original] += use[value]
        plan.kind[value] = kind

    free: list[str] = []     # freed buffers, most recently freed first (ORT's freelist_)
    # A buffer allocated for an output nobody reads is never released for reuse: the layout holds it to the step's
    # end (below), and so does the reuse plan. Measured (docs/notes/growthmiss.md): with this rule MobileNetV2's
    # growth-mode plan (-16.0 %), lossy mobilenet_v1_s (+2.0 %) and three graphs at -0.01 % predict P to the byte,
    # nothing else moves (BatchNormInternal's recomputed saved mean / inv-std are such outputs).
    read = {x for node in plan.nodes for x in node.input if x}
    for node in plan.nodes:
        key = (node.op_type, node.domain)
        for k, y in enumerate(node.output):
            if not y:
                continue
            plan.buffer[y] = y
            if y in outputs:
                plan.kind[y] = "output"
                continue
            src = next((node.input[i] for i, o in alias.get(key, ()) if o == k and i < len(node.input)
                        and node.input[i]), None)
            if src is not None:
                share(src, y, "alias")
                continue
            src = next((node.input[i] for i, o in may_inplace.get(key, ()) if o == k and i < len(node.input)
                        and node.input[i] and use[plan.buffer[node.input[i]]] == 1
                        and same_size(node.input[i], y)), None)
            if src is not None:
                share(src, y, "inplace")
                continue
            s = plan.shapes.get(y)
            hit = None
            if s is not None and s[1] is not None and len(s[1]) > 0:
                hit = next((j for j, b in enumerate(free) if same_size(b, y)), None)
            if hit is not None:
                share(free.pop(hit), y, "reuse")
            else:
                plan.kind[y] = "alloc"
        for name in [*node.input, *node.output]:
            if name and name in plan.buffer:
                original = plan.buffer[name]
                use[original] -= 1
                if use[original] == 0 and (original in read or plan.kind.get(original) != "alloc"):
                    free.insert(0, original)
    n = len(plan.nodes)
    for step, node in enumerate(plan.nodes):
        for y in node.output:
            if y and plan.kind.get(y) == "alloc":
                plan.start[y], plan.end[y] = step, n       # n: nobody reads it, it lives to the end
    last: dict[str, int] = {}
    for step, node in enumerate(plan.nodes):
        for x in node.input:
            if x and plan.kind.get(plan.buffer.get(x, "")) == "alloc":
                last[plan.buffer[x]] = step
    plan.end.update(last)
    return plan


@dataclass
class PatternBlock:
    """ORT's memory-pattern block: ``size`` bytes; ``offsets``: buffer → (offset, bytes); ``dynamic``: tensors
    ORT plans to allocate but cannot place (no static shape), allocated on their own at run time."""
    size: int
    offsets: dict[str, tuple[int, int]]
    dynamic: list[str]
    plan: OrtPlan
    # How P was obtained: "ort" (ORT optimised the graph, then the replay) or "replay" (the replay on the graph
    # as given, ``replay_pattern_block``); with "replay" from ``pattern_block_or_replay``, why ORT could not.
    source: str = "ort"
    fallback_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pattern_bytes": self.size, "planned_buffers": len(self.offsets),
                               "dynamic_tensors": len(self.dynamic), "source": self.source}
        if self.fallback_reason is not None:
            out["fallback_reason"] = self.fallback_reason
        return out


def pattern_block(plan: OrtPlan) -> PatternBlock:
    """Lay out ``plan``'s allocated buffers as ORT's MemPatternPlanner does (module docstring, item 5)."""
    release: dict[int, list[str]] = defaultdict(list)
    for b, step in plan.end.items():
        release[step].append(b)
    placed: dict[str, tuple[int, int]] = {}
    blocks: list[str] = []      # live buffers, by offset (ORT's blocks_ list)
    total, dynamic = 0, []
    for step, node in enumerate(plan.nodes):
        for y in node.output:
            if not y or plan.kind.get(y) != "alloc":
                continue
            size = plan.nbytes(y)
            if size == 0:
                dynamic.append(y)
                continue
            start, end = plan.start[y], plan.end[y]
            current, waste, best = 0, None, None
            for b in blocks:
                if plan.end[b] < start or end < plan.start[b]:
                    continue        # its interval misses this one's: free to overlap
                off, sz = placed[b]
                if off >= current:
                    gap = off - current
                    if gap >= size and (waste is None or gap - size < waste):
                        waste, best = gap - size, current
                current = max(current, off + sz)
            if current < total and total - current >= size and (waste is None or total - current - size < waste):
                best = current
            if best is None:
                best = current
            total = max(total, best + size)
            placed[y] = (best, size)
            at = next((k for k, b in enumerate(blocks)
                       if placed[b][0] > best or (placed[b][0] == best and placed[b][1] >= size)), len(blocks))
            blocks.insert(at, y)
        gone = set(release.get(step, ()))
        if gone:
            blocks = [b for b in blocks if b not in gone]
    return PatternBlock(total, placed, dynamic, plan)


def predict_pattern_block(model_path: str | os.PathLike[str], session_options: Any = None) -> PatternBlock:
    """P for the training graph at ``model_path`` under ORT's default session settings (ORT optimises the graph;
    the rest is replayed here)."""
    original = onnx.load(str(model_path), load_external_data=False)
    optimized = ort_optimized_model(model_path, session_options)
    return pattern_block(allocation_plan(optimized, ort_static_shapes(optimized, original)))


def ort_optimized_model_of(model: onnx.ModelProto, session_options: Any = None,
                           base_dir: str | os.PathLike[str] | None = None) -> onnx.ModelProto:
    """``ort_optimized_model`` for a graph in memory (written to a temporary file for ORT to optimise).
    Initializers kept in external data files are read from ``base_dir`` (the directory their locations are
    relative to; the files are linked into the temporary directory, not copied). Raises whatever ORT's set-up
    raises, and ValueError for external data without ``base_dir``."""
    import tempfile

    from ..load import external_data_files

    files = sorted(external_data_files(model))
    if files and base_dir is None:
        raise ValueError(f"the graph keeps initializers in external data ({files[0]}) and no base_dir says where")
    with tempfile.TemporaryDirectory(prefix="onnxcomp_pattern_") as tmp:
        path = Path(tmp) / "graph.onnx"
        for name in files:
            link = Path(tmp) / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path(base_dir, name).resolve())
        onnx.save(model, str(path))
        return ort_optimized_model(path, session_options)


def predict_pattern_block_of(model: onnx.ModelProto, session_options: Any = None,
                             base_dir: str | os.PathLike[str] | None = None) -> PatternBlock:
    """``predict_pattern_block`` for a graph in memory (``ort_optimized_model_of``: external data read from
    ``base_dir``). Raises whatever ORT's set-up raises, and ValueError for external data without ``base_dir``."""
    optimized = ort_optimized_model_of(model, session_options, base_dir)
    return pattern_block(allocation_plan(optimized, ort_static_shapes(optimized, model)))


def pattern_block_or_replay(model: onnx.ModelProto, session_options: Any = None,
                            base_dir: str | os.PathLike[str] | None = None,
                            purpose: str = "pattern block") -> PatternBlock:
    """``predict_pattern_block_of`` where ORT can set the graph up here; otherwise ``replay_pattern_block`` (blind to
    ORT's graph optimisations, e.g. the NCHWc reorder copies: -21 % on VGG-16's 112 MiB plan), with
    ``source`` "replay" and ``fallback_reason`` set and the reason logged (a warning naming ``purpose``), so a
    caller can report which model its figure came from."""
    try:
        return predict_pattern_block_of(model, session_options, base_dir)
    except Exception as exc:   # noqa: BLE001  (any ORT set-up failure: the replay still gives a figure)
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
    log.warning("%s: ORT could not set the graph up (%s); using the replay without ORT's graph optimisations",
                purpose, reason)
    block = replay_pattern_block(model)
    block.fallback_reason = reason
    return block


def replay_pattern_block(model: onnx.ModelProto) -> PatternBlock:
    """P replayed on ``model`` itself in ORT's DEFAULT order, without ORT: no session, so cheap enough for a
    planner's inner loop, but blind to ORT's graph optimisations. Measured (docs/notes/patternblock.md): within 10 % of
    P on 21 of 23 graphs; VGG-16's 112 MiB plan reads -21 %: ORT's NCHWc transformer wraps its single-output
    MaxPools in ReorderInput/ReorderOutput copies that live across the step (+61 MiB of reorder buffers)."""
    from ..analysis.execution_order import in_run_order

    ordered = in_run_order(model, "default")
    block = pattern_block(allocation_plan(ordered, ort_static_shapes(ordered, model)))
    block.source = "replay"
    return block
