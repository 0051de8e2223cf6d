"""Predicted memory of one training step: bytes live at every node, and the peak, before running anything.

The planner's lower bound on transient buffers in node order, plus what kernels allocate that the graph does
not show (ConvGrad's im2col workspace; a codec op's NumPy temporaries and PyOp bridge copies). Passes that choose between rewrites by their predicted peak
(row_split's --rows auto, defer_weight_grad, chunk_backward) ask this module.
"""
from __future__ import annotations

import functools
import json
import tracemalloc
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir

from ..analysis import GraphAnalysis, analyze_ir, analyze_model
from ..analysis.shapes import share_inferred
from ..analysis.execution_order import in_run_order
from .buffers import live_bytes, lower_bound


def predicted_peak(model: onnx.ModelProto | ir.Model, eager_accumulation: bool = True,
                   payload_store: str = "off") -> int:
    """Training-step peak predicted for ``model`` in node order: the planner's lower bound on transient
    buffers plus ConvGrad's im2col workspace ((C_in/group)*kh*kw x H_out*W_out floats, allocated inside the
    kernel, invisible to the graph; at 512x512 it is VGG-16's largest single allocation).

    eager_accumulation: predict for the graph with weight-gradient accumulators moved right after their
    producers (policy "rows" runs EagerAccumulationPass after this pass).
    payload_store: the run's payload-store mode (runtime.payload_store); "async" adds ``store_workspace``.
    """
    _, live = predicted_live(model, eager_accumulation, payload_store)
    return int(live.max()) if len(live) else 0


def predicted_live(model: onnx.ModelProto | ir.Model, eager_accumulation: bool = True,
                   payload_store: str = "off") -> tuple[onnx.ModelProto | ir.Model, np.ndarray]:
    """The graph the prediction was made on (accumulators moved, see predicted_peak; of the kind given: an
    onnx-ir model or a ModelProto) and the bytes predicted live at each of its nodes (with ``payload_store``'s
    extra holdings, see store_workspace)."""
    if isinstance(model, ir.Model):
        seen, live, analysis = _predicted_live_ir(model, eager_accumulation)
        nodes = list(analysis.ir_nodes)
    else:
        seen, live, analysis = _predicted_live_proto(model, eager_accumulation)
        nodes = list(seen.graph.node)
    if payload_store == "async":
        live += store_workspace(analysis, nodes)
    return seen, live


def _predicted_live_proto(model: onnx.ModelProto,
                          eager_accumulation: bool) -> tuple[onnx.ModelProto, np.ndarray, GraphAnalysis]:
    from . import memo

    seen, live, analysis = memo.cached("predict.live_proto", (id(model), eager_accumulation),
                                       lambda: _predicted_live_proto_uncached(model, eager_accumulation), model)
    return seen, live.copy(), analysis


def _predicted_live_proto_uncached(model: onnx.ModelProto,
                                   eager_accumulation: bool) -> tuple[onnx.ModelProto, np.ndarray, GraphAnalysis]:
    from . import memo

    if eager_accumulation:
        from ..passes.eager_accumulation import eager_order  # the order "rows" leaves behind

        model = eager_order(model)
    analysis = memo.analysis(model)
    n = len(model.graph.node)
    live = np.zeros(n, dtype=np.int64)
    # InPlaceAccumulatorV2's optional second output is its first input's (persistent) buffer, updated in place.
    in_place = {n.output[1] for n in model.graph.node
                if n.op_type == "InPlaceAccumulatorV2" and len(n.output) > 1 and n.output[1]}
    lb = live_bytes([b for b in analysis.buffers() if b.name not in in_place])
    live[: len(lb)] += lb[:n]
    for i, node in enumerate(model.graph.node):
        live[i] += conv_grad_workspace(analysis, node) + codec_workspace(analysis, node) \
            + nchwc_reorder_workspace(analysis, node)
    return model, live, analysis


def _predicted_live_ir(model: ir.Model, eager_accumulation: bool) -> tuple[ir.Model, np.ndarray, GraphAnalysis]:
    """``predicted_live`` on onnx-ir: the accumulators moved on a clone by the pass itself (the clone keeps the
    values' inferred types, so its analysis infers nothing again); ``model`` is not changed."""
    from ..analysis.cached import analysis_of

    if eager_accumulation:
        from ..passes.eager_accumulation import accumulate_eagerly

        seen = model.clone()
        accumulate_eagerly(seen.graph)
        analysis = analyze_ir(seen)
        share_inferred(seen, model)     # what inference typed on the clone: not again for the model itself
    else:
        seen, analysis = model, analysis_of(model)
    nodes = analysis.ir_nodes
    live = np.zeros(len(nodes), dtype=np.int64)
    in_place = {n.outputs[1].name for n in nodes
                if n.op_type == "InPlaceAccumulatorV2" and len(n.outputs) > 1 and n.outputs[1].name}
    lb = live_bytes([b for b in analysis.buffers() if b.name not in in_place])
    live[: len(lb)] += lb[:len(nodes)]
    for i, node in enumerate(nodes):
        live[i] += conv_grad_workspace(analysis, node) + codec_workspace(analysis, node) \
            + nchwc_reorder_workspace(analysis, node)
    return seen, live, analysis


def store_workspace(analysis: GraphAnalysis, nodes: list[onnx.NodeProto] | list[ir.Node]) -> np.ndarray:
    """Bytes the asynchronous payload store (runtime.payload_store, mode "async") holds at each node beyond the
    synchronous ops: an encoder's input copy stays alive until the worker has compressed it -- at the latest
    until the next encoder (which waits for it) or the next decoder -- and a prefetched decode is held from the
    decoder before it (in node order) until its own decoder runs. The payloads themselves live in the store
    instead of ORT's buffers: the same bytes over the same span, already counted by the graph."""
    from ..custom_ops.contract import DECODE_PREFIX, ENCODE_PREFIX

    extra = np.zeros(len(nodes), dtype=np.int64)
    codec_ops = [(i, n) for i, n in enumerate(nodes)
                 if n.op_type.startswith(ENCODE_PREFIX) or n.op_type.startswith(DECODE_PREFIX)]

    def nbytes(name: str) -> int:
        info = analysis.tensors.get(name)
        return info.nbytes if info is not None and info.shape is not None else 0

    for k, (i, node) in enumerate(codec_ops):
        inputs, _ = _io_names(node)
        if node.op_type.startswith(ENCODE_PREFIX) and inputs:
            until = next((j for j, _ in codec_ops[k + 1:]), len(nodes) - 1)
            extra[i + 1:until + 1] += nbytes(inputs[0])   # at i itself the bridge copy is codec_workspace's
    decoders = [i for i, n in codec_ops if n.op_type.startswith(DECODE_PREFIX)]
    for here, nxt in zip(decoders, decoders[1:]):
        outputs = _io_names(nodes[nxt])[1]
        extra[here:nxt] += nbytes(outputs[0]) if outputs else 0
    return extra


def _io_names(node: onnx.NodeProto | ir.Node) -> tuple[list[str], list[str]]:
    if isinstance(node, ir.Node):
        return ([v.name or "" if v is not None else "" for v in node.inputs], [v.name or "" for v in node.outputs])
    return list(node.input), list(node.output)


def live_at(seen: onnx.ModelProto | ir.Model, live: np.ndarray,
            nodes: Callable[[onnx.NodeProto | ir.Node], bool]) -> int:
    """The most bytes predicted live at the nodes of ``seen`` that ``nodes`` selects (0 if none): the bytes
    "at a region" that chunk_backward compares before and after a rewrite (``seen, live = predicted_live(m)``)."""
    listed = seen.graph if isinstance(seen, ir.Model) else seen.graph.node
    return int(max((live[i] for i, nd in enumerate(listed) if nodes(nd)), default=0))


def conv_grad_workspace(analysis: GraphAnalysis, node: onnx.NodeProto | ir.Node) -> int:
    """Bytes of the im2col buffer ORT's CPU ConvGrad allocates for one image (0 for other ops)."""
    if node.op_type != "ConvGrad":
        return 0
    inputs, _ = _io_names(node)
    dy, w = analysis.tensors.get(inputs[0]), analysis.tensors.get(inputs[2])
    if dy is None or w is None or dy.shape is None or w.shape is None:
        return 0
    return int(np.prod(w.shape[1:], dtype=np.int64) * np.prod(dy.shape[2:], dtype=np.int64)) * 4


# Pooling ops ORT's NCHWc transformer (graph optimisation level "all", the session default) runs in the blocked
# layout when they have one output: ReorderInput copies the input to NCHWc first, ReorderOutput copies back.
NCHWC_POOLS = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"}


@functools.lru_cache(maxsize=1)
def nchwc_block_size() -> int:
    """MLAS's NCHWc channel block on this CPU (16 with AVX-512F, 8 with AVX2; 0: ORT uses no NCHWc layout)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return 0
    return 16 if "avx512f" in flags else 8 if "avx2" in flags else 0


def nchwc_reorder_workspace(analysis: GraphAnalysis, node: onnx.NodeProto | ir.Node) -> int:
    """Bytes of the NCHWc copy of a pool's input that ORT's NCHWc transformer adds (0 where it leaves the node
    alone: a MaxPool with an indices output, a channel count not a multiple of the block, no NCHWc on this CPU).
    The copy is live beside the input while ReorderInput runs, and the blocked output beside the pool's NCHW
    output while ReorderOutput runs; the larger of the two is the input's. Row-split forward blocks pool without
    indices: at batch 16, 64x64 their measured RSS ran 0.5 MiB above the graph's live bytes at every block."""
    block = nchwc_block_size()
    if not block or node.op_type not in NCHWC_POOLS:
        return 0
    inputs, outputs = _io_names(node)
    if len([o for o in outputs if o]) != 1 or not inputs:
        return 0
    x = analysis.tensors.get(inputs[0])
    if x is None or x.shape is None or len(x.shape) != 4 or not all(isinstance(d, int) and d > 0 for d in x.shape):
        return 0
    if x.shape[1] % block or x.nbytes != 4 * int(np.prod(x.shape, dtype=np.int64)):   # float32 only
        return 0
    return x.nbytes


def codec_workspace(analysis: GraphAnalysis, node: onnx.NodeProto | ir.Node) -> int:
    """Bytes an ``OnnxcompEncode_/Decode_<codec>`` op holds beyond its graph inputs and outputs while it runs
    (0 for other ops): the PyOp bridge's NumPy copy of every input, and the codec's own NumPy arrays (temporaries
    and the payload or decoded tensor, which the bridge then copies into ORT's output). Measured, not modelled:
    the codec runs once on a tensor of the node's shape under ``tracemalloc`` (NumPy reports its buffers to it),
    cached per op, params and shape. On MobileNetV2 a q8 encoder of a 12 MiB tensor held ~46 MiB more than the
    graph shows, which the step's measured peak (not the prediction) contained."""
    from ..custom_ops.contract import DECODE_PREFIX, ENCODE_PREFIX, PARAMS_ATTR, parse_params

    if not node.op_type.startswith((ENCODE_PREFIX, DECODE_PREFIX)):
        return 0
    inputs, outputs = _io_names(node)
    if node.op_type.startswith(ENCODE_PREFIX):
        direction, name, full = "encode", node.op_type[len(ENCODE_PREFIX):], inputs[0] if inputs else ""
    else:
        direction, name, full = "decode", node.op_type[len(DECODE_PREFIX):], outputs[0] if outputs else ""
    if isinstance(node, ir.Node):
        attr = node.attributes.get(PARAMS_ATTR)
        params = attr.value if attr is not None else "{}"
    else:
        params = next((a.s.decode() for a in node.attribute if a.name == PARAMS_ATTR), "{}")
    info = analysis.tensors.get(full)
    if info is None or info.shape is None:   # a decoded output without shape: the stash it stands for
        info = analysis.tensors.get(str(parse_params(params).get("tensor", "")))
    if info is None or info.shape is None or any(not isinstance(d, int) or d < 0 for d in info.shape):
        return 0
    return _codec_workspace(direction, name, params, tuple(info.shape))


_WARMED: set[tuple[str, str, str, int]] = set()


@functools.lru_cache(maxsize=4096)
def _codec_workspace(direction: str, name: str, params: str, shape: tuple[int, ...]) -> int:
    from ..custom_ops import REGISTRY, cpu
    from ..custom_ops.contract import CONTROL_PARAMS, parse_params

    codec = REGISTRY.get(name)
    if codec is None:
        return 0
    if (measure_as := cpu.workspace_backend(name)) != cpu.backend():  # sparse under auto: NumPy's (larger)
        with cpu.use_backend(measure_as):
            return _codec_workspace.__wrapped__(direction, name, params, shape)
    codec_params = {k: v for k, v in parse_params(params).items() if k not in CONTROL_PARAMS}
    # Post-ReLU-like data (half zeros): the typical stash; sizes of data-dependent payloads follow it.
    x = np.maximum(np.random.default_rng(0).standard_normal(shape, dtype=np.float32), 0)
    x = x.astype(np.dtype(codec.input_dtype), copy=False)
    try:
        payload = None if direction == "encode" else tuple(np.ascontiguousarray(p) for p in codec.encode_cpu(x, **codec_params))
        bridge_in = x.nbytes if payload is None else sum(p.nbytes for p in payload)
        run = (lambda: codec.encode_cpu(x, **codec_params)) if payload is None else \
            (lambda: codec.decode_cpu(payload, **codec_params))
        # A codec's first call per kernel specialisation (rank, params) compiles or loads it from numba's cache
        # and fills lookup tables: not per-call memory, and not the same bytes on a cold cache as on a warm one
        # (a plan written after a cold start differed from a rerun's by 48 B of predicted peak).
        warm_key = (direction, name, json.dumps(codec_params, sort_keys=True), len(shape))   # not per stash
        if warm_key not in _WARMED:
            run()
            run()
            _WARMED.add(warm_key)
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            out = run()
            held = tracemalloc.get_traced_memory()[1] - before
            del out
        finally:
            if started:
                tracemalloc.stop()
    except Exception:  # a codec that needs run-time state (e.g. a controller's bound): its bridge copies only
        return int(np.prod(shape, dtype=np.int64)) * 4
    return int(bridge_in + max(held, 0))


def planned_peak(model: onnx.ModelProto | ir.Model, order: str) -> int:
    """The planner's lower bound on the step's transient bytes in the order ORT runs ``model``'s nodes
    (``order``: "priority" or "default", analysis.execution_order)."""
    if isinstance(model, ir.Model):    # ORT's run order is modelled on protobuf (a reordered copy)
        from ..analysis.cached import snapshot_of

        model = snapshot_of(model)
    return lower_bound(analyze_model(in_run_order(model, order)).buffers())
