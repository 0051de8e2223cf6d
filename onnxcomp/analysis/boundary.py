"""Split a training graph's nodes into forward and backward.

Exported training graphs carry no forward/backward marker (no ``__backwardpass`` attribute), so the
backward pass is found by data flow: every node downstream of a gradient seed — a ``*_grad`` tensor that no
node produces (ORT's loss-gradient initializer) — or of a ``*Grad`` op is backward. Everything else is
forward, including Shape nodes that ORT's gradient builder placed for backward use (they run early and are
cheap).
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx
import onnx_ir as ir

from ..errors import OnnxcompError

# Gradient-accumulation and optimizer ops: backward by nature even where no seed reaches them.
_BACKWARD_OPS = {"InPlaceAccumulatorV2", "InPlaceAccumulator", "ZeroGradient", "AdamWOptimizer",
                 "SGDOptimizerV2", "YieldOp"}
# Domains whose ops are ONNX's or ONNX Runtime's own: an op type means what ORT means by it only there.
ORT_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})


def known_op_type(node: onnx.NodeProto | ir.Node) -> str:
    """The node's op type when it is an ONNX/ORT op, else ``domain::op_type`` (a vendor's ``ReluGrad`` is not
    ORT's, so no pattern or gradient rule may match it)."""
    return node.op_type if node.domain in ORT_DOMAINS else f"{node.domain}::{node.op_type}"


@dataclass
class Boundary:
    forward: list[int]          # node indices, in node order
    backward: list[int]
    seeds: list[str]            # gradient seeds the backward pass starts from
    first_backward: int         # node index of the first backward node

    def is_backward(self, node_index: int) -> bool:
        return node_index in self._backward_set

    def __post_init__(self) -> None:
        self._backward_set = set(self.backward)


def find_boundary(graph: onnx.GraphProto | ir.Graph, where: str = "model",
                  nodes: list[ir.Node] | None = None) -> Boundary:
    """Forward and backward node indices of ``graph`` (``nodes``: an onnx-ir graph's node list, when the
    caller has it). A ``GraphProto`` is read through onnx-ir (tests and tools; passes hand the ir graph)."""
    if isinstance(graph, onnx.GraphProto):
        graph = ir.serde.deserialize_graph(graph)
    nodes = list(graph) if nodes is None else nodes
    # Seeds: gradients nothing makes (ORT's loss-gradient initializer); graph inputs and initializers have no
    # producer by construction.
    sources = {v.name: v for v in [*graph.inputs, *graph.initializers.values()] if v.name}
    produced = {o.name for n in nodes for o in n.outputs if o.name}
    seeds = sorted(name for name in sources if name.endswith("_grad") and name not in produced)
    tainted: set[ir.Value] = {sources[s] for s in seeds}
    backward: list[int] = []
    for idx, node in enumerate(nodes):  # node lists are topologically sorted in ONNX
        op = known_op_type(node)
        is_grad_op = op.endswith("Grad") and "::" not in op or op in _BACKWARD_OPS
        if is_grad_op or any(v in tainted for v in node.inputs if v is not None):
            backward.append(idx)
            tainted.update(node.outputs)
    if not backward:
        raise OnnxcompError(f"{where}: no backward pass found (no gradient ops, no *_grad seed) — this looks "
                            "like an inference-only graph; pass the training_model.onnx that "
                            "onnxruntime.training.artifacts.generate_artifacts produced")
    bset = set(backward)
    forward = [i for i in range(len(nodes)) if i not in bset]
    return Boundary(forward, backward, seeds, backward[0])
