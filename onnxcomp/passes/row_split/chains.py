"""Finding the conv chains a row split can take (Conv -> Relu -> Pool -> Conv ...).

Graph facts come from the cached analysis (forward/backward boundary, static shapes, dtypes) and the
onnx-ir graph's use/def links; node ``k`` of the graph is node ``k`` of the analysed snapshot.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...analysis import GraphAnalysis
from ..base import Skipped
from .geometry import GRAD_OPS, Chain, Layer, _geometry

ACCUMULATOR = "InPlaceAccumulatorV2"


def find_chains(analysis: GraphAnalysis, graph: ir.Graph) -> tuple[list[Chain], list[Skipped]]:
    """The conv chains of ``graph`` (forward layers in order, each with its backward op), and the runs of
    chain ops left alone (no Conv). ``analysis``: of ``graph``'s current state (or of a graph it was cloned
    from: only node positions are shared)."""
    finder = _ChainFinder(analysis, graph)
    return finder.assemble(finder.layers())


class _ChainFinder:
    """Named steps of the chain search: ``layer_of`` (a forward op with its unique backward op and row
    geometry), ``links`` (two layers that directly continue each other), ``assemble`` (maximal runs)."""

    def __init__(self, analysis: GraphAnalysis, graph: ir.Graph) -> None:
        self.analysis = analysis
        self.nodes = list(graph)
        if len(self.nodes) != len(analysis.nodes):
            raise ValueError("row_split: the analysis is not of this graph (node counts differ)")
        self.index = {node: k for k, node in enumerate(self.nodes)}
        self.graph_outputs = set(graph.outputs)

    def is_backward(self, node: ir.Node) -> bool:
        return self.analysis.boundary.is_backward(self.index[node])

    def readers(self, value: ir.Value, backward: bool) -> list[ir.Node]:
        """The nodes reading ``value`` in backward (or in forward), once each, in node order."""
        users = {u.node for u in value.uses() if u.node in self.index and self.is_backward(u.node) == backward}
        return sorted(users, key=self.index.__getitem__)

    def shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        t = self.analysis.tensors.get(value.name) if value is not None else None
        return t.shape if t is not None else None

    def layers(self) -> dict[ir.Node, Layer]:
        """Every forward op that can be a chain layer."""
        found: dict[ir.Node, Layer] = {}
        for i in self.analysis.boundary.forward:
            lay = self.layer_of(self.nodes[i])
            if isinstance(lay, Layer):
                found[self.nodes[i]] = lay
        return found

    def backward_op(self, n: ir.Node, x: ir.Value, y: ir.Value) -> ir.Node | str:
        """The unique backward op of forward op ``n`` (input x, output y), or why there is none: a backward
        node of the right type that reads y's gradient (ORT names it "<y>_grad") first, and the tensors the
        gradient needs from forward (Conv: x and the weight; Relu: x or y; MaxPool: its indices)."""
        gtype, _ = GRAD_OPS[n.op_type]
        dy = self.analysis.tensors.get(y.name + "_grad")
        cands = [] if dy is None else sorted({self.nodes[c] for c in dy.consumers}, key=self.index.__getitem__)
        cands = [g for g in cands if self.is_backward(g) and g.op_type == gtype and g.inputs
                 and g.inputs[0] is not None and g.inputs[0].name == dy.name]
        if n.op_type == "Conv":
            cands = [g for g in cands if len(g.inputs) > 2 and g.inputs[1] is x and g.inputs[2] is n.inputs[1]]
        elif n.op_type in ("Relu", "LeakyRelu"):
            cands = [g for g in cands if len(g.inputs) > 1 and g.inputs[1] is not None and g.inputs[1] in (x, y)]
        elif n.op_type == "MaxPool":
            cands = [g for g in cands if len(n.outputs) > 1 and len(g.inputs) > 1 and g.inputs[1] is n.outputs[1]]
        if len(cands) != 1:
            return "no unique backward op"
        return cands[0]

    def layer_of(self, n: ir.Node) -> Layer | str:
        if n.op_type not in GRAD_OPS or n.domain not in ("", "ai.onnx"):
            return "not a chain op"
        x, y = n.inputs[0], n.outputs[0]
        xs, ys = self.shape(x), self.shape(y)
        if not xs or not ys or len(xs) != 4 or len(ys) != 4:
            return "shape not static 4-D"
        if self.analysis.tensors[x.name].type.dtype != np.float32:
            return "not float32"
        g = self.backward_op(n, x, y)
        if isinstance(g, str):
            return g
        if g.outputs[0].name and g.outputs[0].name != x.name + "_grad":
            return "backward op's output is not the input's gradient"
        w_shape = self.shape(n.inputs[1]) if n.op_type == "Conv" else None
        geo = _geometry(n, w_shape)
        if isinstance(geo, str):
            return geo
        k, s, pt, pb = geo
        ws = int(np.prod(w_shape[1:])) * ys[3] * 4 if w_shape else 0
        return Layer(n, g, x, y, tuple(xs), tuple(ys), k, s, pt, pb,
                     grad_reads_y=(n.op_type in ("Relu", "LeakyRelu") and g.inputs[1] is y and x is not y),
                     ws_row_bytes=ws)

    def links(self, lo: Layer, hi: Layer) -> bool:
        """Whether hi directly continues lo: lo's output is read only by hi in forward, only by the two
        backward ops in backward, and its gradient flows only from hi's backward op to lo's."""
        y = lo.y
        if hi.x is not y or self.readers(y, backward=False) != [hi.fwd]:
            return False
        if any(g not in (lo.grad, hi.grad) for g in self.readers(y, backward=True)):
            return False
        if lo.kind == "MaxPool" and any(u.node is not lo.grad for u in lo.fwd.outputs[1].uses()):
            return False
        gy = hi.grad.outputs[0]
        if gy.name != y.name + "_grad" or {u.node for u in gy.uses()} != {lo.grad}:
            return False
        return y not in self.graph_outputs

    def assemble(self, layers: dict[ir.Node, Layer]) -> tuple[list[Chain], list[Skipped]]:
        """Maximal runs of linked layers, in node order; runs without a Conv are skipped."""
        chains: list[Chain] = []
        skipped: list[Skipped] = []
        used: set[ir.Node] = set()
        for start in sorted(layers, key=self.index.__getitem__):
            if start in used:
                continue
            run = [layers[start]]
            while True:
                nxt = self.readers(run[-1].y, backward=False)
                if len(nxt) != 1 or nxt[0] not in layers or nxt[0] in used or not self.links(run[-1], layers[nxt[0]]):
                    break
                run.append(layers[nxt[0]])
            used.update(lay.fwd for lay in run)
            if not any(lay.kind == "Conv" for lay in run):
                skipped.append(Skipped(run[0].y.name, "row-split", "chain of " + "/".join(
                    lay.kind for lay in run) + " has no Conv: recomputing it saves too little to split"))
                continue
            # A lone Conv drops no stash but its ConvGrad's im2col workspace still shrinks R-fold.
            chains.append(Chain(run))
        return chains, skipped


def sole_accumulator(grad: ir.Value | None) -> ir.Node | None:
    """The InPlaceAccumulatorV2 that is the only reader of a weight gradient (ORT's gradient accumulation)."""
    if grad is None or not grad.name:
        return None
    users = {u.node for u in grad.uses()}
    if len(users) != 1:
        return None
    (node,) = users
    if node.op_type != ACCUMULATOR or len(node.inputs) < 3 or node.inputs[1] is not grad or len(node.outputs) != 1:
        return None
    return node
