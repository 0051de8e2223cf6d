"""Finding the conv chains a row split can take (Conv -> Relu -> Pool -> Conv ...)."""
from __future__ import annotations

import numpy as np
import onnx

from ...analysis import GraphAnalysis
from ..base import Skipped
from .geometry import GRAD_OPS, Chain, Layer, _geometry


def _find_chains(analysis: GraphAnalysis) -> tuple[list[Chain], list[Skipped]]:
    """The conv chains of the graph (forward layers in order, each with its backward op), and the runs of
    chain ops left alone (no Conv)."""
    finder = _ChainFinder(analysis)
    return finder.assemble(finder.layers())


class _ChainFinder:
    """Named steps of the chain search: ``layer_of`` (a forward op with its unique backward op and row
    geometry), ``links`` (two layers that directly continue each other), ``assemble`` (maximal runs)."""

    def __init__(self, analysis: GraphAnalysis) -> None:
        self.analysis = analysis
        self.nodes = list(analysis.model.graph.node)
        self.bwd = analysis.boundary.is_backward
        # The backward op of each forward op: ORT names the gradient of tensor t "t_grad".
        self.by_grad_in: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            if self.bwd(i) and n.input:
                self.by_grad_in.setdefault(n.input[0], []).append(i)

    def shape(self, name: str) -> tuple[int, ...] | None:
        t = self.analysis.tensors.get(name)
        return t.shape if t is not None else None

    def fwd_consumers(self, name: str) -> list[int]:
        t = self.analysis.tensors.get(name)
        return [c for c in t.consumers if not self.bwd(c)] if t else []

    def bwd_consumers(self, name: str) -> list[int]:
        t = self.analysis.tensors.get(name)
        return [c for c in t.consumers if self.bwd(c)] if t else []

    def layers(self) -> dict[int, Layer]:
        """Every forward op that can be a chain layer, by node index."""
        found: dict[int, Layer] = {}
        for i in self.analysis.boundary.forward:
            lay = self.layer_of(i)
            if isinstance(lay, Layer):
                found[i] = lay
        return found

    def backward_op(self, n: onnx.NodeProto, x: str, y: str) -> int | str:
        """The unique backward op of forward op ``n`` (input x, output y), or why there is none."""
        gtype, _ = GRAD_OPS[n.op_type]
        cands = [j for j in self.by_grad_in.get(y + "_grad", []) if self.nodes[j].op_type == gtype]
        if n.op_type == "Conv":
            cands = [j for j in cands if self.nodes[j].input[1] == x and self.nodes[j].input[2] == n.input[1]]
        elif n.op_type in ("Relu", "LeakyRelu"):
            cands = [j for j in cands if self.nodes[j].input[1] in (x, y)]
        elif n.op_type == "MaxPool":
            cands = [j for j in cands if len(n.output) > 1 and self.nodes[j].input[1] == n.output[1]]
        if len(cands) != 1:
            return "no unique backward op"
        return cands[0]

    def layer_of(self, i: int) -> Layer | str:
        n = self.nodes[i]
        if n.op_type not in GRAD_OPS or n.domain not in ("", "ai.onnx"):
            return "not a chain op"
        x, y = n.input[0], n.output[0]
        xs, ys = self.shape(x), self.shape(y)
        if not xs or not ys or len(xs) != 4 or len(ys) != 4:
            return "shape not static 4-D"
        if self.analysis.tensors[x].type.dtype != np.float32:
            return "not float32"
        j = self.backward_op(n, x, y)
        if isinstance(j, str):
            return j
        g = self.nodes[j]
        if g.output[0] and g.output[0] != x + "_grad":
            return "backward op's output is not the input's gradient"
        geo = _geometry(n, self.shape(n.input[1]) if n.op_type == "Conv" else None)
        if isinstance(geo, str):
            return geo
        k, s, pt, pb = geo
        ws = 0
        if n.op_type == "Conv":
            wsh = self.shape(n.input[1])
            ws = int(np.prod(wsh[1:])) * ys[3] * 4 if wsh else 0
        return Layer(n, g, x, y, tuple(xs), tuple(ys), k, s, pt, pb,
                     grad_reads_y=(n.op_type in ("Relu", "LeakyRelu") and g.input[1] == y and x != y),
                     ws_row_bytes=ws)

    def links(self, lo: Layer, hi: Layer, hi_idx: int) -> bool:
        """Whether hi directly continues lo: lo's output is read only by hi in forward, only by the two
        backward ops in backward, and its gradient flows only from hi's backward op to lo's."""
        nodes, tensors = self.nodes, self.analysis.tensors
        y = lo.y
        if hi.x != y or self.fwd_consumers(y) != [hi_idx]:
            return False
        allowed = {id(lo.grad), id(hi.grad)}
        if any(id(nodes[c]) not in allowed for c in self.bwd_consumers(y)):
            return False
        if lo.kind == "MaxPool" and any(id(nodes[c]) != id(lo.grad) for c in tensors[lo.fwd.output[1]].consumers):
            return False
        gy = y + "_grad"
        if hi.grad.output[0] != gy or [id(nodes[c]) for c in tensors[gy].consumers] != [id(lo.grad)]:
            return False
        return y not in {o.name for o in self.analysis.model.graph.output}

    def assemble(self, layers: dict[int, Layer]) -> tuple[list[Chain], list[Skipped]]:
        """Maximal runs of linked layers, in node order; runs without a Conv are skipped."""
        chains: list[Chain] = []
        skipped: list[Skipped] = []
        used: set[int] = set()
        for i in sorted(layers):
            if i in used:
                continue
            run = [i]
            while True:
                cur = layers[run[-1]]
                nxt = self.fwd_consumers(cur.y)
                if len(nxt) != 1 or nxt[0] not in layers or nxt[0] in used or \
                        not self.links(cur, layers[nxt[0]], nxt[0]):
                    break
                run.append(nxt[0])
            used.update(run)
            chain_layers = [layers[j] for j in run]
            if not any(lay.kind == "Conv" for lay in chain_layers):
                skipped.append(Skipped(chain_layers[0].y, "row-split", "chain of " + "/".join(
                    lay.kind for lay in chain_layers) + " has no Conv: recomputing it saves too little to split"))
                continue
            # A lone Conv drops no stash but its ConvGrad's im2col workspace still shrinks R-fold.
            chains.append(Chain(chain_layers))
        return chains, skipped


def _sole_accumulator(analysis: GraphAnalysis, grad: str) -> int | None:
    """The InPlaceAccumulatorV2 that is the only reader of a weight gradient (ORT's gradient accumulation)."""
    t = analysis.tensors.get(grad) if grad else None
    if t is None or len(t.consumers) != 1:
        return None
    node = analysis.model.graph.node[t.consumers[0]]
    if node.op_type != "InPlaceAccumulatorV2" or len(node.input) < 3 or node.input[1] != grad or len(node.output) != 1:
        return None
    return t.consumers[0]
