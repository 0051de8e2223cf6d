"""Pass: weight gradients as soon as their inputs exist (transformer graphs).

ORT's gradient builder emits every MatMul's weight gradient — ``Gemm(Reshape(A)ᵀ, Reshape(dY))`` and its
accumulator — at the very end of the backward node list. Under the priority order (node-list order) that
keeps, for every linear layer, both its forward input A and its output gradient dY alive until the end
of backward: GPT-tiny (4 blocks, batch 16, T 256) held 72 MiB of gradients that way, and the recompute
passes could not rebuild A (a LayerNorm output) from a LayerNorm input already freed by then.

The pass moves every *weight-gradient branch* — backward nodes whose outputs reach exactly one gradient
accumulator (the dX data path reaches those of all earlier layers) — right behind the last producer of its
inputs, keeping the relative order
of everything else. Same ops on the same tensors, so training is bit-identical. Nodes gated on a late
tensor (the deferred large fc gradients of passes/defer_weight_grad.py) stay late: their inputs appear
late. Applied only to graphs with transformer gradient ops (LayerNormalizationGrad, SoftmaxGrad): in CNN
graphs ConvGrad makes dX and dW together and EagerAccumulationPass already places the accumulators.
"""
from __future__ import annotations

import onnx_ir as ir

from ..analysis import analysis_of
from .base import OnnxcompPass, PassOutcome
from .records import PassRecord

_ACCUMULATORS = ("InPlaceAccumulatorV2", "InPlaceAccumulator")
TRANSFORMER_GRADS = ("LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad", "SoftmaxGrad", "SoftmaxGrad_13")


class EarlyWeightGradientPass(OnnxcompPass):
    name = "early_weight_grad"
    full_check = False   # reorders nodes: wiring and gates are checked

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        nodes = list(graph)
        if not any(n.op_type in TRANSFORMER_GRADS for n in nodes):
            return outcome
        analysis = analysis_of(model)      # node indices are the IR graph's
        index = {n: i for i, n in enumerate(nodes)}
        # Backward region: ORT's backward nodes, plus nodes placed among them that read only forward tensors
        # (the Reshape of A ahead of a weight-gradient Gemm), which data flow alone calls forward.
        grad_nodes = set(analysis.boundary.backward)
        region = set(range(min(grad_nodes), len(nodes))) if grad_nodes else set()
        branch = _weight_gradient_branches(nodes, index, region)
        if not branch:
            return outcome
        order = _Schedule(graph, nodes, index, grad_nodes, branch).order(region)
        for k, i in enumerate(order):
            if i in branch and k != i:
                name = nodes[i].name or nodes[i].outputs[0].name
                outcome.records.append(PassRecord("moved", self.name, name, {
                    "node": name, "op": nodes[i].op_type, "pass": self.name, "from": i, "to": k}))
        if order != list(range(len(nodes))):
            graph.remove(nodes)                  # not "safe": every node keeps its inputs, only the order changes
            graph.extend(nodes[i] for i in order)
            outcome.modified = True
        return outcome


def _weight_gradient_branches(nodes: list[ir.Node], index: dict[ir.Node, int], region: set[int]) -> set[int]:
    """Weight-gradient branches, found from the back: backward nodes whose outputs reach exactly one
    gradient accumulator (the data path, dX, reaches the accumulators of every earlier layer)."""
    reach: dict[int, frozenset[int]] = {}
    branch: set[int] = set()
    for i in sorted(region, reverse=True):
        if nodes[i].op_type in _ACCUMULATORS:
            reach[i] = frozenset({i})
        else:
            readers = {index[u.node] for o in nodes[i].outputs for u in o.uses() if u.node in index}
            reach[i] = frozenset().union(*(reach.get(c, frozenset({-1})) for c in readers))
        if len(reach[i]) == 1 and -1 not in reach[i]:
            branch.add(i)
    return branch


class _Schedule:
    """The new node order: branch nodes emitted as soon as what they read exists. Active branch nodes read a
    gradient (directly or through the branch); passive ones (views of forward tensors) are emitted only when
    an active one needs them, so nothing is made earlier than needed."""

    def __init__(self, graph: ir.Graph, nodes: list[ir.Node], index: dict[ir.Node, int], grad_nodes: set[int],
                 branch: set[int]) -> None:
        self.nodes, self.index, self.branch = nodes, index, branch
        self.active: set[int] = set()
        for i in sorted(branch):
            if any(self.producer(x) in grad_nodes or self.producer(x) in self.active for x in nodes[i].inputs):
                self.active.add(i)
        self.produced: set[ir.Value | None] = {None, *graph.inputs, *graph.initializers.values()}
        self.pending = set(branch)
        self.emitted: list[int] = []

    def producer(self, v: ir.Value | None) -> int | None:
        node = v.producer() if v is not None else None
        return self.index.get(node) if node is not None else None

    def ready(self, i: int) -> bool:
        return all(x in self.produced or ((p := self.producer(x)) in self.pending and p not in self.active
                                          and self.ready(p))
                   for x in self.nodes[i].inputs)

    def emit(self, i: int) -> None:
        for x in self.nodes[i].inputs:
            if x not in self.produced and (p := self.producer(x)) in self.pending:
                self.emit(p)
        self.emitted.append(i)
        self.produced.update(self.nodes[i].outputs)
        self.pending.discard(i)

    def release(self) -> None:
        progressed = True
        while progressed:
            progressed = False
            for i in sorted(self.pending & self.active):
                if i in self.pending and self.ready(i):
                    self.emit(i)
                    progressed = True

    def order(self, region: set[int]) -> list[int]:
        for i, n in enumerate(self.nodes):
            if i in self.branch:
                continue
            self.emitted.append(i)
            self.produced.update(n.outputs)
            if i in region:
                self.release()
        self.release()
        for i in sorted(self.pending):  # passive nodes no active one needed: at the end
            self.emit(i)
        return self.emitted
