"""Predicted memory of one training step: bytes live at every node, and the peak, before running anything.

The planner's lower bound on transient buffers in node order, plus what kernels allocate that the graph does
not show (ConvGrad's im2col workspace). Passes that choose between rewrites by their predicted peak
(row_split's --rows auto, defer_weight_grad, chunk_backward) ask this module.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from ..analysis import GraphAnalysis, analyze_model
from ..analysis.execution_order import in_run_order
from .buffers import live_bytes, lower_bound


def predicted_peak(model: onnx.ModelProto, eager_accumulation: bool = True) -> int:
    """Training-step peak predicted for ``model`` in node order: the planner's lower bound on transient
    buffers plus ConvGrad's im2col workspace ((C_in/group)*kh*kw x H_out*W_out floats, allocated inside the
    kernel, invisible to the graph; at 512x512 it is VGG-16's largest single allocation).

    eager_accumulation: predict for the graph with weight-gradient accumulators moved right after their
    producers (policy "rows" runs EagerAccumulationPass after this pass).
    """
    _, live = predicted_live(model, eager_accumulation)
    return int(live.max()) if len(live) else 0


def predicted_live(model: onnx.ModelProto, eager_accumulation: bool = True) -> tuple[onnx.ModelProto, np.ndarray]:
    """The graph the prediction was made on (accumulators moved, see predicted_peak) and the bytes
    predicted live at each of its nodes."""
    if eager_accumulation:
        from ..passes.eager_accumulation import eager_order  # the order "rows" leaves behind

        model = eager_order(model)
    analysis = analyze_model(model)
    n = len(model.graph.node)
    live = np.zeros(n, dtype=np.int64)
    # InPlaceAccumulatorV2's optional second output is its first input's (persistent) buffer, updated in place.
    in_place = {n.output[1] for n in model.graph.node
                if n.op_type == "InPlaceAccumulatorV2" and len(n.output) > 1 and n.output[1]}
    lb = live_bytes([b for b in analysis.buffers() if b.name not in in_place])
    live[: len(lb)] += lb[:n]
    for i, node in enumerate(model.graph.node):
        live[i] += conv_grad_workspace(analysis, node)
    return model, live


def live_at(seen: onnx.ModelProto, live: np.ndarray, nodes: Callable[[onnx.NodeProto], bool]) -> int:
    """The most bytes predicted live at the nodes of ``seen`` that ``nodes`` selects (0 if none): the bytes
    "at a region" that chunk_backward compares before and after a rewrite (``seen, live = predicted_live(m)``)."""
    return int(max((live[i] for i, nd in enumerate(seen.graph.node) if nodes(nd)), default=0))


def conv_grad_workspace(analysis: GraphAnalysis, node: onnx.NodeProto) -> int:
    """Bytes of the im2col buffer ORT's CPU ConvGrad allocates for one image (0 for other ops)."""
    if node.op_type != "ConvGrad":
        return 0
    dy, w = analysis.tensors.get(node.input[0]), analysis.tensors.get(node.input[2])
    if dy is None or w is None or dy.shape is None or w.shape is None:
        return 0
    return int(np.prod(w.shape[1:], dtype=np.int64) * np.prod(dy.shape[2:], dtype=np.int64)) * 4


def planned_peak(model: onnx.ModelProto, order: str) -> int:
    """The planner's lower bound on the step's transient bytes in the order ORT runs ``model``'s nodes
    (``order``: "priority" or "default", analysis.execution_order)."""
    return lower_bound(analyze_model(in_run_order(model, order)).buffers())
