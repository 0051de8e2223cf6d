"""The order in which ONNX Runtime 1.19 runs a graph's nodes, under both of its execution orders.

Re-implemented from onnxruntime/core/graph/graph_viewer.cc and checked against ORT's own profiling trace
(tests/test_execution_order.py), so the model of ORT is tested, not assumed:
- DEFAULT: reverse depth-first walk from the leaves (nodes no other node reads). Leaves go on a stack in node
  index order, so the highest-indexed leaf is walked first; a node's input nodes are pushed in ascending index
  order (the highest is walked first); a node is emitted after all its inputs (post-order).
- PRIORITY_BASED: Kahn's sort; among ready nodes Shape/Size first, then the lowest node index.
ORT drops Identity nodes and constant-folds Shape of statically shaped tensors before ordering; so do we.

Passes place nodes by node-list index, which is what PRIORITY follows; what DEFAULT does with the same list
is what this module predicts.
"""
from __future__ import annotations

import heapq
from typing import Literal

import onnx

ORDERS = ("default", "priority")
Order = Literal["default", "priority"]


def _ort_view(model: onnx.ModelProto) -> tuple[list[int], dict[int, list[int]], dict[int, list[int]]]:
    g = model.graph
    alias: dict[str, str] = {}
    keep = []
    for i, n in enumerate(g.node):
        if n.op_type == "Identity":
            alias[n.output[0]] = n.input[0]
        elif n.op_type != "Shape":
            keep.append(i)

    def resolve(x: str) -> str:
        while x in alias:
            x = alias[x]
        return x

    producer = {o: i for i in keep for o in g.node[i].output if o}
    inputs = {i: sorted({producer[resolve(x)] for x in g.node[i].input if x and resolve(x) in producer})
              for i in keep}
    outputs: dict[int, list[int]] = {i: [] for i in keep}
    for i in keep:
        for j in inputs[i]:
            outputs[j].append(i)
    return keep, inputs, outputs


def ort_order(model: onnx.ModelProto, order: str) -> list[int]:
    """Node indices in the order ORT 1.19 runs them (see module docstring)."""
    keep, inputs, outputs = _ort_view(model)
    seq: list[int] = []
    if order == "default":
        stack = [(i, False) for i in keep if not outputs[i]]
        seen: set[int] = set()
        while stack:
            n, leave = stack.pop()
            if leave:
                seq.append(n)
                continue
            if n in seen:
                continue
            seen.add(n)
            stack.append((n, True))
            stack.extend((j, False) for j in inputs[n])
        return seq
    if order != "priority":
        raise ValueError(f"unknown execution order {order!r}; use one of {ORDERS}")
    nodes = model.graph.node
    indeg = {i: len(inputs[i]) for i in keep}
    key = lambda i: (nodes[i].op_type not in ("Shape", "Size"), i)  # noqa: E731
    ready = [key(i) for i in keep if indeg[i] == 0]
    heapq.heapify(ready)
    while ready:
        _, n = heapq.heappop(ready)
        seq.append(n)
        for j in outputs[n]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, key(j))
    return seq


def in_run_order(model: onnx.ModelProto, order: str) -> onnx.ModelProto:
    """A copy whose node list is ORT's run order (dropped Identity/Shape nodes right after their inputs),
    so node-order analyses (planner live bytes) describe what ORT does."""
    g = model.graph
    seq = ort_order(model, order)
    kept = set(seq)
    folded: set[int] = set()
    for i in range(len(g.node)):
        if i not in kept:
            made = {o: k for k, j in enumerate(seq) for o in g.node[j].output}
            at = max((made[x] + 1 for x in g.node[i].input if x in made), default=0)
            outs = set(g.node[i].output)
            first_read = min((k for k, j in enumerate(seq) if outs & set(g.node[j].input)), default=len(seq))
            if first_read < at:   # a folded Shape read before its input exists: a constant, reading nothing
                at = first_read
                folded.add(i)
            seq.insert(at, i)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(g.node[i] for i in seq)
    for k, i in enumerate(seq):
        if i in folded:
            del out.graph.node[k].input[:]
    return out
