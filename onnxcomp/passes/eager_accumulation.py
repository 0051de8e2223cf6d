"""Pass: accumulate each weight gradient as soon as it exists.

ORT's gradient builder appends every InPlaceAccumulatorV2 at the end of the node list, so under the
priority-based order all weight gradients of the step stay alive together until backward ends — for a
ResNet-18 that is as much memory as its weights, on top of the stashed activations. Moving each accumulator
right after its gradient's producer frees the gradient at once. Only the order changes: same ops, same
arithmetic, bit-identical results.
"""
from __future__ import annotations

import onnx

from .base import GraphPass, PassResult, require_training_graph

ACCUMULATORS = {"InPlaceAccumulatorV2", "InPlaceAccumulator"}


class EagerAccumulationPass(GraphPass):
    name = "eager_accumulation"

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        result = PassResult(self.copy(model))
        nodes = list(result.model.graph.node)
        producer_of = {o: n for n in nodes for o in n.output if o}
        accumulators = [n for n in nodes if n.op_type in ACCUMULATORS]
        moved = []
        for acc in accumulators:
            # Ready when its last input exists: buffers and the reset flag are graph inputs.
            deps = [producer_of[i] for i in acc.input if i in producer_of]
            if not deps:
                continue
            nodes.remove(acc)
            anchor = max(deps, key=lambda d: next(k for k, n in enumerate(nodes) if n is d))
            pos = next(k for k, n in enumerate(nodes) if n is anchor) + 1
            nodes.insert(pos, acc)
            if pos != len(nodes) - 1:
                moved.append({"tensor": acc.input[1] if len(acc.input) > 1 else acc.name, "pass": self.name,
                              "after": anchor.name})
        del result.model.graph.node[:]
        result.model.graph.node.extend(nodes)
        result.records = []  # reordering encodes nothing; report through .moved
        self.moved = moved
        return result
