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

import onnx

from ..analysis import analysis_of
from .base import GraphPass, PassResult, require_training_graph
from .records import PassRecord

_ACCUMULATORS = ("InPlaceAccumulatorV2", "InPlaceAccumulator")
_TRANSFORMER_GRADS = ("LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad", "SoftmaxGrad", "SoftmaxGrad_13")


class EarlyWeightGradientPass(GraphPass):
    name = "early_weight_grad"

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        result = PassResult(self.copy(model))
        graph = result.model.graph
        if not any(n.op_type in _TRANSFORMER_GRADS for n in graph.node):
            return result
        analysis = analysis_of(model)
        nodes = list(graph.node)
        # Backward region: ORT's backward nodes, plus nodes placed among them that read only forward tensors
        # (the Reshape of A ahead of a weight-gradient Gemm), which data flow alone calls forward.
        grad_nodes = set(analysis.boundary.backward)
        region = set(range(min(grad_nodes), len(nodes))) if grad_nodes else set()
        producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
        consumers: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            for name in n.input:
                consumers.setdefault(name, []).append(i)
        # Weight-gradient branches, found from the back: backward nodes whose outputs reach exactly one
        # gradient accumulator (the data path, dX, reaches the accumulators of every earlier layer).
        reach: dict[int, frozenset[int]] = {}
        branch: set[int] = set()
        for i in sorted(region, reverse=True):
            if nodes[i].op_type in _ACCUMULATORS:
                reach[i] = frozenset({i})
            else:
                readers = {c for o in nodes[i].output if o for c in consumers.get(o, [])}
                reach[i] = frozenset().union(*(reach.get(c, frozenset({-1})) for c in readers))
            if len(reach[i]) == 1 and -1 not in reach[i]:
                branch.add(i)
        if not branch:
            return result
        # Active branch nodes read a gradient (directly or through the branch); passive ones (views of forward
        # tensors) are emitted only when an active one needs them, so nothing is made earlier than needed.
        active: set[int] = set()
        for i in sorted(branch):
            if any(producer.get(x) in grad_nodes or producer.get(x) in active for x in nodes[i].input):
                active.add(i)
        produced = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
        pending = set(branch)
        order: list[int] = []

        def ready(i: int) -> bool:
            return all(x in produced or (producer.get(x) in pending and producer[x] not in active
                                         and ready(producer[x])) for x in nodes[i].input)

        def emit(i: int) -> None:
            for x in nodes[i].input:
                if x not in produced and producer.get(x) in pending:
                    emit(producer[x])
            order.append(i)
            produced.update(nodes[i].output)
            pending.discard(i)

        def release() -> None:
            progressed = True
            while progressed:
                progressed = False
                for i in sorted(pending & active):
                    if i in pending and ready(i):
                        emit(i)
                        progressed = True

        for i, n in enumerate(nodes):
            if i in branch:
                continue
            order.append(i)
            produced.update(n.output)
            if i in region:
                release()
        release()
        for i in sorted(pending):  # passive nodes no active one needed: at the end
            emit(i)
        for k, i in enumerate(order):
            if i in branch and k != i:
                name = nodes[i].name or nodes[i].output[0]
                result.records.append(PassRecord("moved", self.name, name, {
                    "node": name, "op": nodes[i].op_type, "pass": self.name, "from": i, "to": k}))
        if order != list(range(len(nodes))):
            del graph.node[:]
            graph.node.extend(nodes[i] for i in order)
        return result
