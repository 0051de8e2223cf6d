"""Row-centric convolution (LR-CNN, OverL / 2PS and their checkpoint hybrids) on an ORT training graph.

What the pass does to a chain of forward ops ``Conv -> Relu|LeakyRelu -> MaxPool|AveragePool -> Conv ...``
(each intermediate tensor read by exactly one forward op; BatchNorm, residual Adds, concatenations and
everything else end a chain):

* The forward pass is left as it is (default), but the chain's intermediates are no longer read in backward,
  so they die right after their forward consumer. Only the chain input (and, for the hybrids, segment
  inputs: checkpoints) stays stashed. ``split_forward=True`` also runs the forward row by row (LR-CNN's FP:
  per-block rows, one Concat per segment output); measured, it cuts the forward's own peak (VGG-16 512x512:
  34 vs 128 MiB) but the training-step peak came out 5-25 MiB *higher* than with the unsplit forward, so
  it is off by default (cause not found yet).
* The chain's backward nodes (ConvGrad, ReluGrad, LeakyReluGrad, MaxPoolGrad, AveragePoolGrad) are replaced,
  for row blocks r = 1..R along the height axis, by: slice the rows of the checkpoint that block r's
  receptive field needs (its halo), recompute the chain forward on that slice with *semi-closed padding*
  (a clone keeps its real top/bottom padding only where the block touches the true image border, so the
  recomputed rows are exactly the original rows), then run clones of the original backward ops on the
  block's rows. Weight/bias gradients of every block go straight into the optimizer's gradient buffer
  (a chain of InPlaceAccumulatorV2 whose first link honours lazy_reset_grad; no running sum lives across
  blocks) or, where no sole accumulator reads them, into a running Add. The chain input's gradient is
  assembled from per-block pieces by overlap-add and one Concat.
* OverL: blocks are independent; halos overlap and are recomputed; each block back-propagates its own
  output rows' gradient through its own sub-network. Exact by linearity of backprop.
* 2PS: each row of each layer is computed once: a block keeps the rows the next block needs (forward
  halo rows and the rows its backward windows reach) and the next block concatenates them in front of
  its new rows; partial input gradients of boundary rows are carried to the next block and added there, so
  backward also touches each row once (MaxPool indices are the one exception: they are recomputed by a
  cheap MaxPool over the backward window, because the forward window of that block differs).
* Ordering: block 1's slices take a zero derived from one element of the chain output's gradient dY (ORT
  cannot fold it), and block r+1's from block r's last backward result (and its kept rows), so under both
  ORT execution orders only one block's intermediates are alive at a time.
* Hybrids (checkpoints): a chain is cut into segments whose inputs stay stashed; ``checkpoints="auto"``
  picks the cut that minimises a predicted per-block peak plus checkpoint bytes, an int N cuts N segments.
* ``rows="auto"`` with ``budget_bytes``: the smallest R whose rewritten graph's predicted training-step
  peak fits the budget (LR-CNN §III-C), predicted by ``predicted_peak``: the planner's lower bound on the
  analysed graph plus ConvGrad's im2col workspace (within 1 MiB of the measured VGG-16 512x512 baseline;
  for row-split graphs it misses 10-25% of ORT overheads, so plan with a margin).

Row-split and row-merge are standard ONNX ops here (Slice, Pad, Add, Concat): they are memcpy-bound, ORT's
CPU kernels for them are as fast as a custom op would be, and a PyOp would add the bridge's copy of every
input (platform notes) plus a Python call per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..analysis import GraphAnalysis, analyze_model
from ..errors import OnnxcompError
from .base import GraphPass, PassResult, Skipped, even_bounds, require_training_graph, taken_names, unique_name

MS_DOMAIN = "com.microsoft"
VARIANTS = ("overl", "2ps")
# Forward op -> (backward op type, its domain).
GRAD_OPS: dict[str, tuple[str, str]] = {
    "Conv": ("ConvGrad", MS_DOMAIN),
    "Relu": ("ReluGrad", MS_DOMAIN),
    "LeakyRelu": ("LeakyReluGrad", MS_DOMAIN),
    "MaxPool": ("MaxPoolGrad", ""),
    "AveragePool": ("AveragePoolGrad", ""),
}
_AUTO_R_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


@dataclass
class Layer:
    """One forward op of a chain and its backward op, with its row geometry (NCHW, rows = axis 2)."""

    fwd: onnx.NodeProto
    grad: onnx.NodeProto
    x: str                      # T_{l-1}
    y: str                      # T_l
    x_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    k: int = 1                  # effective kernel height ((K-1)*dilation + 1)
    s: int = 1                  # row stride
    pt: int = 0                 # top padding
    pb: int = 0                 # bottom padding
    grad_reads_y: bool = False  # Relu/LeakyRelu backward reading the output instead of the input
    ws_row_bytes: int = 0       # ConvGrad im2col bytes per output row (one image)

    @property
    def kind(self) -> str:
        return self.fwd.op_type

    @property
    def h_in(self) -> int:
        return self.x_shape[2]

    @property
    def h_out(self) -> int:
        return self.y_shape[2]

    def need(self, a: int, b: int) -> tuple[int, int]:
        """Input rows [ia, ib) that output rows [a, b) read (clamped to the real image)."""
        return max(0, a * self.s - self.pt), min(self.h_in, (b - 1) * self.s - self.pt + self.k)

    def pads(self, a: int, b: int) -> tuple[int, int, int, int]:
        """(ia, ib, top, bottom): the window and the semi-closed pads that make a clone produce exactly
        output rows [a, b): real padding only where the window runs past the true border."""
        ia, ib = self.need(a, b)
        top = self.pt + ia - a * self.s
        bottom = (b - 1) * self.s - self.pt + self.k - ib
        if top < 0 or bottom < 0:
            raise OnnxcompError(f"row geometry of {self.fwd.name!r}: negative pad for rows [{a}, {b})")
        return ia, ib, top, bottom

    def row_bytes(self, which: str) -> int:
        shp = self.x_shape if which == "x" else self.y_shape
        return int(np.prod(shp, dtype=np.int64)) // shp[2] * 4

    @property
    def has_params(self) -> bool:
        return self.kind == "Conv"


@dataclass
class Chain:
    layers: list[Layer]
    segments: list[tuple[int, int]] = field(default_factory=list)   # [i, j) layer index ranges

    @property
    def name(self) -> str:
        return self.layers[0].fwd.name or self.layers[0].y


# ------------------------------------------------------------------------------------------- chain finding

def _geometry(node: onnx.NodeProto, w_shape: tuple[int, ...] | None) -> tuple[int, int, int, int] | str:
    """(k, s, pt, pb) of a 2-D conv/pool along rows, or why the op can't be split."""
    a = _attrs(node)
    if node.op_type in ("Relu", "LeakyRelu"):
        return 1, 1, 0, 0
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={a['auto_pad']}"
    if a.get("ceil_mode", 0):
        return "ceil_mode=1"
    if node.op_type == "MaxPool" and a.get("storage_order", 0):
        return "storage_order=1"
    kernel = a.get("kernel_shape") or (list(w_shape[2:]) if w_shape else None)
    if not kernel or len(kernel) != 2:
        return "not a 2-D op"
    strides = a.get("strides") or [1, 1]
    dil = a.get("dilations") or [1, 1]
    pads = a.get("pads") or [0, 0, 0, 0]
    if a.get("auto_pad", "NOTSET") == "VALID":
        pads = [0, 0, 0, 0]
    return (kernel[0] - 1) * dil[0] + 1, strides[0], pads[0], pads[2]


def _find_chains(analysis: GraphAnalysis) -> tuple[list[Chain], list[Skipped]]:
    graph = analysis.model.graph
    nodes = list(graph.node)
    bwd = analysis.boundary.is_backward
    skipped: list[Skipped] = []

    def shape(name: str) -> tuple[int, ...] | None:
        t = analysis.tensors.get(name)
        return t.shape if t is not None else None

    def fwd_consumers(name: str) -> list[int]:
        t = analysis.tensors.get(name)
        return [c for c in t.consumers if not bwd(c)] if t else []

    def bwd_consumers(name: str) -> list[int]:
        t = analysis.tensors.get(name)
        return [c for c in t.consumers if bwd(c)] if t else []

    # The backward op of each forward op: ORT names the gradient of tensor t "t_grad".
    by_grad_in: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        if bwd(i) and n.input:
            by_grad_in.setdefault(n.input[0], []).append(i)

    def layer_of(i: int) -> Layer | str:
        n = nodes[i]
        if n.op_type not in GRAD_OPS or n.domain not in ("", "ai.onnx"):
            return "not a chain op"
        x, y = n.input[0], n.output[0]
        xs, ys = shape(x), shape(y)
        if not xs or not ys or len(xs) != 4 or len(ys) != 4:
            return "shape not static 4-D"
        if analysis.tensors[x].type.dtype != np.float32:
            return "not float32"
        gtype, gdom = GRAD_OPS[n.op_type]
        cands = [j for j in by_grad_in.get(y + "_grad", []) if nodes[j].op_type == gtype]
        if n.op_type == "Conv":
            cands = [j for j in cands if nodes[j].input[1] == x and nodes[j].input[2] == n.input[1]]
        elif n.op_type in ("Relu", "LeakyRelu"):
            cands = [j for j in cands if nodes[j].input[1] in (x, y)]
        elif n.op_type == "MaxPool":
            cands = [j for j in cands if len(n.output) > 1 and nodes[j].input[1] == n.output[1]]
        if len(cands) != 1:
            return "no unique backward op"
        g = nodes[cands[0]]
        if g.output[0] and g.output[0] != x + "_grad":
            return "backward op's output is not the input's gradient"
        geo = _geometry(n, shape(n.input[1]) if n.op_type == "Conv" else None)
        if isinstance(geo, str):
            return geo
        k, s, pt, pb = geo
        ws = 0
        if n.op_type == "Conv":
            wsh = shape(n.input[1])
            ws = int(np.prod(wsh[1:])) * ys[3] * 4 if wsh else 0
        return Layer(n, g, x, y, tuple(xs), tuple(ys), k, s, pt, pb,
                     grad_reads_y=(n.op_type in ("Relu", "LeakyRelu") and g.input[1] == y and x != y),
                     ws_row_bytes=ws)

    layers: dict[int, Layer] = {}
    for i in analysis.boundary.forward:
        lay = layer_of(i)
        if isinstance(lay, Layer):
            layers[i] = lay

    def links(lo: Layer, hi: Layer, hi_idx: int) -> bool:
        """Whether hi directly continues lo: lo's output is read only by hi in forward, only by the two
        backward ops in backward, and its gradient flows only from hi's backward op to lo's."""
        y = lo.y
        if hi.x != y or fwd_consumers(y) != [hi_idx]:
            return False
        allowed = {id(lo.grad), id(hi.grad)}
        if any(id(nodes[c]) not in allowed for c in bwd_consumers(y)):
            return False
        if lo.kind == "MaxPool" and any(id(nodes[c]) != id(lo.grad) for c in analysis.tensors[lo.fwd.output[1]].consumers):
            return False
        gy = y + "_grad"
        if hi.grad.output[0] != gy or [id(nodes[c]) for c in analysis.tensors[gy].consumers] != [id(lo.grad)]:
            return False
        return y not in {o.name for o in analysis.model.graph.output}

    chains: list[Chain] = []
    used: set[int] = set()
    order = sorted(layers)
    for i in order:
        if i in used:
            continue
        run = [i]
        while True:
            cur = layers[run[-1]]
            nxt = fwd_consumers(cur.y)
            if len(nxt) != 1 or nxt[0] not in layers or nxt[0] in used or not links(cur, layers[nxt[0]], nxt[0]):
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


def _internal_stash_bytes(layers: list[Layer], i: int, j: int) -> int:
    """Bytes the original graph stashes inside layers[i:j] that a segment [i, j) recomputes instead."""
    total = 0
    for t in range(i + 1, j):          # T_t for t = i+1..j-1 is stashed when a backward op reads it
        lo, hi = layers[t - 1], layers[t]
        if lo.grad_reads_y or hi.kind == "Conv" or (hi.kind in ("Relu", "LeakyRelu") and not hi.grad_reads_y):
            total += lo.row_bytes("y") * lo.h_out
    for t in range(i, j):
        lay = layers[t]
        if lay.kind == "MaxPool":
            total += lay.row_bytes("y") * lay.h_out * 2   # int64 indices
    return total


# ------------------------------------------------------------------------------------------- row schedules

def _overl_windows(layers: list[Layer], a: int, b: int) -> list[tuple[int, int]]:
    """Row ranges [T_0 .. T_k] one OverL block touches for output rows [a, b)."""
    ranges = [(0, 0)] * (len(layers) + 1)
    ranges[-1] = (a, b)
    for li in range(len(layers) - 1, -1, -1):
        ranges[li] = layers[li].need(*ranges[li + 1])
    return ranges


@dataclass
class _TwoPS:
    """Static row bookkeeping of 2PS: U[j][r] rows of T_j computed after block r (forward), C[j][r] rows
    of dL/dT_j complete after block r (backward), keep[j][r] first row of T_j kept for later blocks."""
    U: list[list[int]]
    C: list[list[int]]
    keep: list[list[int]]


def _twops_plan(layers: list[Layer], R: int) -> _TwoPS:
    k = len(layers)
    H = [layers[0].h_in] + [lay.h_out for lay in layers]
    U = [[0] * (R + 1) for _ in range(k + 1)]
    C = [[0] * (R + 1) for _ in range(k + 1)]
    U[k] = even_bounds(H[k], R)
    C[k] = list(U[k])
    for j in range(k - 1, -1, -1):
        lay = layers[j]
        for r in range(1, R + 1):
            U[j][r] = H[j] if r == R else lay.need(0, U[j + 1][r])[1]
            C[j][r] = H[j] if r == R else min(lay.need(C[j + 1][r], H[j + 1])[0], U[j][r])
    # keep[j][r]: smallest row of T_j that a block after r still reads.
    starts: list[list[int]] = [[10 ** 12] * (R + 2) for _ in range(k + 1)]
    for j in range(1, k + 1):
        for r in range(1, R + 1):
            s = 10 ** 12
            if j < k and U[j + 1][r] > U[j + 1][r - 1]:
                s = min(s, layers[j].need(U[j + 1][r - 1], U[j + 1][r])[0])
            if j < k and C[j + 1][r] > C[j + 1][r - 1]:
                s = min(s, layers[j].need(C[j + 1][r - 1], C[j + 1][r])[0])
            if _reads_y(layers[j - 1]) and C[j][r] > C[j][r - 1]:
                s = min(s, C[j][r - 1])
            starts[j][r] = s
    keep = [[10 ** 12] * (R + 1) for _ in range(k + 1)]
    for j in range(1, k + 1):
        for r in range(R - 1, -1, -1):
            keep[j][r] = min(keep[j][r + 1] if r + 1 < R else 10 ** 12, starts[j][r + 1])
    return _TwoPS(U, C, keep)


def _reads_y(lay: Layer) -> bool:
    return lay.grad_reads_y


def _block_bytes(layers: list[Layer], R: int, variant: str) -> int:
    """Predicted live bytes of the largest block (recomputed rows of every layer + indices + two gradient
    windows in flight): the cost model behind checkpoints='auto'."""
    R = max(1, min(R, layers[-1].h_out))
    row = [layers[0].row_bytes("x")] + [lay.row_bytes("y") for lay in layers]
    extra = [0] + [lay.row_bytes("y") * 2 if lay.kind == "MaxPool" else 0 for lay in layers]
    best = 0
    if variant == "overl":
        sp = even_bounds(layers[-1].h_out, R)
        for r in range(1, R + 1):
            w = _overl_windows(layers, sp[r - 1], sp[r])
            rows = [b - a for a, b in w]
            live = sum(n * (row[j] + extra[j]) for j, n in enumerate(rows)) + 2 * max(n * row[j] for j, n in enumerate(rows))
            ws = max(lay.ws_row_bytes * rows[j + 1] for j, lay in enumerate(layers))
            best = max(best, live + ws)
        return best
    plan = _twops_plan(layers, R)
    for r in range(1, R + 1):
        ia, ib = layers[0].need(plan.U[1][r - 1], plan.U[1][r]) if plan.U[1][r] > plan.U[1][r - 1] else (0, 0)
        live = (ib - ia) * row[0]
        grad = 0
        for j in range(1, len(layers) + 1):
            lo = min(plan.keep[j][r - 1], plan.U[j][r - 1])
            live += (plan.U[j][r] - lo) * (row[j] + extra[j])
        for j in range(len(layers) + 1):
            halo = layers[j - 1].k if j > 0 else 1
            grad = max(grad, (plan.C[j][r] - plan.C[j][r - 1] + halo) * row[j])
        ws = max(lay.ws_row_bytes * (plan.C[j + 1][r] - plan.C[j + 1][r - 1]) for j, lay in enumerate(layers))
        best = max(best, live + 2 * grad + ws)
    return best


def _choose_segments(layers: list[Layer], R: int, variant: str, checkpoints: int | str) -> list[tuple[int, int]]:
    """Cut layers into segments [i, j). auto: minimise max block bytes + checkpoint bytes (fewest cuts on
    ties); N: the best cut into exactly N segments under the same objective."""
    k = len(layers)
    ck = [0] + [layers[i - 1].row_bytes("y") * layers[i - 1].h_out for i in range(1, k)]  # T_i stashed

    cost: dict[tuple[int, int], int] = {}
    for i in range(k):
        for j in range(i + 1, k + 1):
            if any(lay.kind == "Conv" for lay in layers[i:j]) or j - i == 1:
                cost[(i, j)] = _block_bytes(layers[i:j], R, variant)
    if checkpoints == "auto":
        n_fixed = None
    else:
        n_fixed = max(1, min(int(checkpoints), k))
    thresholds = sorted(set(cost.values()))
    if len(thresholds) > 96:
        thresholds = [thresholds[int(q)] for q in np.linspace(0, len(thresholds) - 1, 96)]
    best: tuple[float, int, list[tuple[int, int]]] | None = None
    inf = float("inf")
    for B in thresholds:
        # dp[j][n] = min checkpoint bytes covering layers [0, j) with n segments, each of cost <= B
        maxn = n_fixed if n_fixed else k
        dp = [[inf] * (maxn + 1) for _ in range(k + 1)]
        back: dict[tuple[int, int], int] = {}
        dp[0][0] = 0
        for j in range(1, k + 1):
            for i in range(j):
                c = cost.get((i, j))
                if c is None or c > B:
                    continue
                for n in range(1, maxn + 1):
                    v = dp[i][n - 1] + ck[i]
                    if v < dp[j][n]:
                        dp[j][n] = v
                        back[(j, n)] = i
        ns = [n_fixed] if n_fixed else range(1, maxn + 1)
        for n in ns:
            if dp[k][n] == inf:
                continue
            obj = B + dp[k][n]
            if best is None or obj < best[0] or (obj == best[0] and n < best[1]):
                segs, j, m = [], k, n
                while m > 0:
                    i = back[(j, m)]
                    segs.append((i, j))
                    j, m = i, m - 1
                best = (obj, n, segs[::-1])
    if best is None:   # fewer cuttable places than asked: one segment per layer at most
        return [(0, k)]
    return best[2]


# ------------------------------------------------------------------------------------------- graph emission

@dataclass
class _Strip:
    """A tensor holding rows [start, end) of some NCHW tensor."""
    name: str
    start: int
    end: int


class _Emitter:
    def __init__(self, model: onnx.ModelProto, taken: set[str], prefix: str) -> None:
        self.model = model
        self.taken = taken
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self._consts: dict[tuple, str] = {}
        self.recomputed_rows = 0

    def name(self, base: str) -> str:
        return unique_name(f"{self.prefix}/{base}", self.taken)

    def const(self, values: list[int], dtype: int = TensorProto.INT64) -> str:
        key = (tuple(values), dtype)
        if key not in self._consts:
            n = unique_name(f"onnxcomp_rows_c_{'_'.join(str(v).replace('-', 'm') for v in values)}", self.taken)
            self.model.graph.initializer.append(helper.make_tensor(n, dtype, [len(values)], values))
            self._consts[key] = n
        return self._consts[key]

    def node(self, op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op, inputs, outputs, name=self.name(op), domain=domain, **attrs))

    def vi(self, name: str, shape: list[int], elem: int = TensorProto.FLOAT) -> None:
        self.value_info.append(helper.make_tensor_value_info(name, elem, shape))

    def out(self, base: str, shape: list[int] | None, elem: int = TensorProto.FLOAT) -> str:
        n = self.name(base)
        if shape is not None:
            self.vi(n, shape, elem)
        return n

    # --- gating: a zero that exists only once its sources do
    def gate(self, sources: list[str]) -> str:
        elems = []
        for s in sources:
            flat = self.out("gate_flat", None)
            self.node("Reshape", [s, self.const([-1])], [flat])
            e = self.out("gate_elem", [1])
            self.node("Slice", [flat, self.const([0]), self.const([1])], [e])
            elems.append(e)
        cat = elems[0]
        if len(elems) > 1:
            cat = self.out("gate_cat", [len(elems)])
            self.node("Concat", elems, [cat], axis=0)
        nan = self.out("gate_nan", [len(elems)], TensorProto.BOOL)
        self.node("IsNaN", [cat], [nan])
        ints = self.out("gate_int", [len(elems)], TensorProto.INT64)
        self.node("Cast", [nan], [ints], to=TensorProto.INT64)
        tot = self.out("gate_sum", [1], TensorProto.INT64)
        self.node("ReduceSum", [ints, self.const([0])], [tot], keepdims=1)
        z = self.out("gate_zero", [1], TensorProto.INT64)
        self.node("Mul", [tot, self.const([0])], [z])
        return z

    def rows(self, src: _Strip, a: int, b: int, shape: tuple[int, ...], gate: str | None = None) -> _Strip:
        """Rows [a, b) of a strip (zeros where the strip has none), optionally gated."""
        if a >= b:
            raise OnnxcompError(f"row-split: empty row range [{a}, {b}) requested")
        lo, hi = max(a, src.start), min(b, src.end)
        n, c, _, w = shape
        if lo >= hi:
            z = self.out("zeros", [n, c, b - a, w])
            self.node("ConstantOfShape", [self.const([n, c, b - a, w])], [z],
                      value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))
            return _Strip(z, a, b)
        t = src.name
        if lo != src.start or hi != src.end or gate is not None:
            starts, ends = self.const([lo - src.start]), self.const([hi - src.start])
            if gate is not None:
                s2, e2 = self.out("start", [1], TensorProto.INT64), self.out("end", [1], TensorProto.INT64)
                self.node("Add", [starts, gate], [s2])
                self.node("Add", [ends, gate], [e2])
                starts, ends = s2, e2
            t = self.out("rows", [n, c, hi - lo, w])
            self.node("Slice", [src.name, starts, ends, self.const([2])], [t])
        if lo > a or hi < b:
            p = self.out("padded", [n, c, b - a, w])
            self.node("Pad", [t, self.const([0, 0, lo - a, 0, 0, 0, b - hi, 0])], [p], mode="constant")
            t = p
        return _Strip(t, a, b)

    def add(self, x: _Strip, y: _Strip, shape: tuple[int, ...], out: str | None = None) -> _Strip:
        a, b = min(x.start, y.start), max(x.end, y.end)
        xs, ys = self.rows(x, a, b, shape), self.rows(y, a, b, shape)
        n, c, _, w = shape
        o = out or self.out("sum", [n, c, b - a, w])
        self.node("Add", [xs.name, ys.name], [o])
        return _Strip(o, a, b)


def _clone_attrs(node: onnx.NodeProto, top: int, bottom: int) -> list[onnx.AttributeProto]:
    attrs = []
    for a in node.attribute:
        if a.name == "pads":
            p = list(helper.get_attribute_value(a))
            attrs.append(helper.make_attribute("pads", [top, p[1], bottom, p[3]]))
        elif a.name == "auto_pad":
            attrs.append(helper.make_attribute("auto_pad", "NOTSET"))
        else:
            c = onnx.AttributeProto()
            c.CopyFrom(a)
            attrs.append(c)
    if node.op_type in ("Conv", "ConvGrad", "MaxPool", "MaxPoolGrad", "AveragePool", "AveragePoolGrad") and \
            not any(a.name == "pads" for a in node.attribute):
        attrs.append(helper.make_attribute("pads", [top, 0, bottom, 0]))
    return attrs


def _emit(em: _Emitter, op: str, domain: str, inputs: list[str], outputs: list[str],
          like: onnx.NodeProto, top: int, bottom: int) -> None:
    n = helper.make_node(op, inputs, outputs, name=em.name(op), domain=domain)
    n.attribute.extend(_clone_attrs(like, top, bottom))
    em.nodes.append(n)


class _SegmentWriter:
    """Emits one segment's replacement backward (both variants)."""

    def __init__(self, em: _Emitter, layers: list[Layer], R: int, wshapes: dict[str, tuple[int, ...]],
                 accumulators: dict[str, onnx.NodeProto] | None = None) -> None:
        self.em = em
        self.wshapes = wshapes
        self.accumulators = accumulators or {}   # gradient name -> the InPlaceAccumulatorV2 that reads it
        self.flags: dict[str, str] = {}
        self.L = layers
        self.R = R
        self.k = len(layers)
        self.dW: dict[int, list[str | None]] = {}   # layer -> running [dW, dB] sums
        self.x0 = _Strip(layers[0].x, 0, layers[0].h_in)
        self.dy = _Strip(layers[-1].y + "_grad", 0, layers[-1].h_out)
        self.need_dx0 = bool(layers[0].grad.output[0])

    def shape(self, j: int) -> tuple[int, ...]:
        return self.L[0].x_shape if j == 0 else self.L[j - 1].y_shape

    def fwd(self, li: int, x: _Strip, a: int, b: int, with_idx: bool = True) -> tuple[_Strip, str | None]:
        """Layer li's output rows [a, b) from a strip holding (at least) the rows they need."""
        lay = self.L[li]
        ia, ib, top, bottom = lay.pads(a, b)
        xin = self.em.rows(x, ia, ib, self.shape(li)) if (x.start, x.end) != (ia, ib) else x
        n, c, _, w = lay.y_shape
        y = self.em.out(f"{lay.kind}_y", [n, c, b - a, w])
        outs = [y]
        idx = None
        inputs = [xin.name] + list(lay.fwd.input[1:])
        if lay.kind == "MaxPool" and with_idx:
            idx = self.em.out("MaxPool_idx", [n, c, b - a, w], TensorProto.INT64)
            outs.append(idx)
        _emit(self.em, lay.kind, lay.fwd.domain, inputs, outs, lay.fwd, top, bottom)
        self.em.recomputed_rows += b - a
        return _Strip(y, a, b), idx

    def bwd(self, li: int, dy: _Strip, x: _Strip | None, y: _Strip | None, idx: str | None,
            final: bool, want_dx: bool = True) -> _Strip | None:
        """Backward of layer li for output-gradient rows dy: the partial input gradient over the window."""
        lay = self.L[li]
        a, b = dy.start, dy.end
        ia, ib, top, bottom = lay.pads(a, b)
        n, c, _, w = lay.x_shape
        dx = self.em.out(f"{lay.kind}_dx", [n, c, ib - ia, w]) if want_dx else ""
        gtype, gdom = GRAD_OPS[lay.kind]
        if lay.kind == "Conv":
            xin = self.em.rows(x, ia, ib, self.shape(li)) if (x.start, x.end) != (ia, ib) else x
            wname = lay.fwd.input[1]
            wshape = list(self._wshape(wname))
            has_b = len(lay.grad.output) > 2 and bool(lay.grad.output[2])
            orig = list(lay.grad.output) + [""] * (3 - len(lay.grad.output))
            first = li not in self.dW
            names = []
            for k_, (oname, shp) in enumerate(((orig[1], wshape), (orig[2], [wshape[0]]))):
                if not oname:
                    names.append("")
                else:
                    names.append(self.em.out("dW" if k_ == 0 else "dB", shp))
            _emit(self.em, gtype, gdom, [dy.name, xin.name, wname], [dx, names[0], names[1] if has_b else ""],
                  lay.grad, top, bottom)
            acc = self.dW.get(li, ["", ""])
            new = []
            for k_, (prev, cur) in enumerate(zip(acc, names)):
                ipa = self.accumulators.get(orig[1 + k_]) if cur else None
                if ipa is not None:
                    # Straight into the optimizer's gradient buffer: no running sum lives across blocks.
                    buf_in, flag = (ipa.input[0], ipa.input[2]) if first else (prev, self._false())
                    buf_out = self.em.out("grad_buffer", wshape if k_ == 0 else [wshape[0]])
                    done = self.em.out("accumulated", [1], TensorProto.BOOL)
                    self.em.node("InPlaceAccumulatorV2", [buf_in, cur, flag], [done, buf_out], domain=MS_DOMAIN)
                    self.flags[orig[1 + k_]] = done
                    new.append(buf_out)
                elif not cur or first:
                    new.append(cur or prev)
                else:
                    o = self.em.out("dW_acc" if k_ == 0 else "dB_acc", wshape if k_ == 0 else [wshape[0]])
                    self.em.node("Add", [prev, cur], [o])
                    new.append(o)
            self.dW[li] = new
        elif lay.kind in ("Relu", "LeakyRelu"):
            src = y if lay.grad_reads_y else x
            src = self.em.rows(src, a, b, lay.y_shape if src is y else self.shape(li)) \
                if (src.start, src.end) != (a, b) else src
            _emit(self.em, gtype, gdom, [dy.name, src.name], [dx], lay.grad, 0, 0)
        elif lay.kind == "MaxPool":
            if idx is None:     # 2PS: the backward window differs from the forward one: re-pool it
                _, idx = self.fwd(li, x, a, b)
            _emit(self.em, gtype, gdom, [dy.name, idx], [dx], lay.grad, top, bottom)
        else:  # AveragePool
            _emit(self.em, gtype, gdom, [dy.name], [dx], lay.grad, top, bottom)
        return _Strip(dx, ia, ib) if want_dx else None

    def _append_rows(self, held: _Strip | None, new: _Strip, j: int, base: str) -> _Strip:
        """Layer j's rows held so far with ``new`` (the rows right below them) appended: one Concat."""
        if held is None:
            return new
        n_, c_, _, w_ = self.shape(j)
        cat = self.em.out(base, [n_, c_, new.end - held.start, w_])
        self.em.node("Concat", [held.name, new.name], [cat], axis=2)
        return _Strip(cat, held.start, new.end)

    def _wshape(self, w: str) -> tuple[int, ...]:
        return self.wshapes[w]

    def _false(self) -> str:
        if not hasattr(self, "_false_name"):
            self._false_name = unique_name("onnxcomp_rows_false", self.em.taken)
            self.em.model.graph.initializer.append(helper.make_tensor(self._false_name, TensorProto.BOOL, [1], [False]))
        return self._false_name

    def finish_params(self) -> None:
        """The summed weight/bias gradients under the names the optimizer's accumulators read (or, when the
        blocks accumulated straight into the gradient buffers, the accumulators' flag outputs)."""
        for li, names in self.dW.items():
            orig = list(self.L[li].grad.output) + [""] * 3
            for k_, n in enumerate(names):
                if not n or not orig[1 + k_]:
                    continue
                ipa = self.accumulators.get(orig[1 + k_])
                if ipa is not None:
                    self.em.node("Identity", [self.flags[orig[1 + k_]]], [ipa.output[0]])
                else:
                    self.em.node("Identity", [n], [orig[1 + k_]])

    # ------------------------------------------------------------------ forward, row by row (LR-CNN FP)
    def forward_split(self, variant: str) -> None:
        """Replace the segment's forward ops: its output is assembled (one Concat) from per-block rows, so
        only one block's intermediates exist at a time in the forward pass too."""
        k, R = self.k, self.R
        sp = even_bounds(self.L[-1].h_out, R)
        strips: list[_Strip] = []
        gate_src: list[str] = []
        if variant == "overl":
            for r in range(1, R + 1):
                w = _overl_windows(self.L, sp[r - 1], sp[r])
                z = self.em.gate(gate_src) if gate_src else None
                cur = self.em.rows(self.x0, *w[0], self.shape(0), gate=z)
                for li in range(k):
                    cur, _ = self.fwd(li, cur, *w[li + 1], with_idx=False)
                strips.append(cur)
                gate_src = [cur.name]
        else:
            U = _twops_plan(self.L, R).U
            keep = [[10 ** 12] * (R + 1) for _ in range(k + 1)]
            for j in range(1, k):
                for r in range(R - 1, -1, -1):
                    nxt = 10 ** 12
                    if U[j + 1][r + 1] > U[j + 1][r]:
                        nxt = self.L[j].need(U[j + 1][r], U[j + 1][r + 1])[0]
                    keep[j][r] = min(nxt, keep[j][r + 1] if r + 1 < R else 10 ** 12)
            buf: dict[int, _Strip | None] = {j: None for j in range(1, k)}
            for r in range(1, R + 1):
                z = self.em.gate(gate_src) if gate_src else None
                for li in range(k):
                    j = li + 1
                    a, b = U[j][r - 1], U[j][r]
                    if a == b:
                        continue
                    if li == 0:
                        src = self.em.rows(self.x0, *self.L[0].need(a, b), self.shape(0), gate=z)
                    else:
                        src = buf[li]
                    new, _ = self.fwd(li, src, a, b, with_idx=False)
                    if j == k:
                        strips.append(new)
                    else:
                        buf[j] = self._append_rows(buf[j], new, j, "fbuf")
                gate_src = [strips[-1].name]
                for j in range(1, k):
                    if buf[j] is None:
                        continue
                    ks = max(keep[j][r], buf[j].start)
                    if r == R or ks >= buf[j].end:
                        buf[j] = None
                        continue
                    if ks > buf[j].start:
                        buf[j] = self.em.rows(buf[j], ks, buf[j].end, self.shape(j))
                    gate_src.append(buf[j].name)
        target = self.L[-1].y
        if len(strips) == 1:
            self.em.node("Identity", [strips[0].name], [target])
        else:
            self.em.node("Concat", [p.name for p in strips], [target], axis=2)

    # ------------------------------------------------------------------ OverL
    def overl(self, gate_src: list[str]) -> dict[str, Any]:
        sp = even_bounds(self.L[-1].h_out, self.R)
        pending: _Strip | None = None
        done: list[_Strip] = []
        halos = []
        for r in range(1, self.R + 1):
            final = r == self.R
            w = _overl_windows(self.L, sp[r - 1], sp[r])
            halos.append([b - a for a, b in w])
            z = self.em.gate(gate_src)
            T: dict[int, _Strip] = {0: self.em.rows(self.x0, *w[0], self.shape(0), gate=z)}
            idx: dict[int, str | None] = {}
            for li in range(self.k):
                if li + 1 < self.k or _reads_y(self.L[li]):
                    T[li + 1], idx[li] = self.fwd(li, T[li], *w[li + 1])
            g: _Strip | None = self.em.rows(self.dy, sp[r - 1], sp[r], self.shape(self.k), gate=z)
            last = g.name
            for li in range(self.k - 1, -1, -1):
                want = li > 0 or self.need_dx0
                g_new = self.bwd(li, g, T[li], T.get(li + 1), idx.get(li), final, want)
                last = g_new.name if g_new is not None else self._last_param_grad(li)
                g = g_new
            if self.need_dx0:
                # overlap-add into the pending strip; its rows above this block's window are final
                if pending is not None and g.start > pending.start:
                    done.append(self.em.rows(pending, pending.start, g.start, self.shape(0)))
                    pending = self.em.rows(pending, g.start, pending.end, self.shape(0)) \
                        if pending.end > g.start else None
                pending = g if pending is None else self.em.add(pending, g, self.shape(0))
                last = pending.name
            gate_src = [last]
        if self.need_dx0:
            self._assemble_dx0(done, pending)
        return {"halo_rows": halos, "splits": sp}

    def _last_param_grad(self, li: int) -> str:
        names = [n for n in self.dW.get(li, []) if n]
        return names[0]

    def _assemble_dx0(self, done: list[_Strip], pending: _Strip | None) -> None:
        H0 = self.L[0].h_in
        parts = done + ([pending] if pending is not None else [])
        # fill gaps (rows no output reads: zero gradient)
        full: list[_Strip] = []
        at = 0
        for p in parts:
            if p.start > at:
                full.append(self.em.rows(_Strip("", 0, 0), at, p.start, self.shape(0)))
            full.append(p)
            at = p.end
        if at < H0:
            full.append(self.em.rows(_Strip("", 0, 0), at, H0, self.shape(0)))
        target = self.L[0].grad.output[0]
        if len(full) == 1:
            self.em.node("Identity", [full[0].name], [target])
        else:
            self.em.node("Concat", [p.name for p in full], [target], axis=2)

    # ------------------------------------------------------------------ 2PS
    def twops(self, gate_src: list[str]) -> dict[str, Any]:
        plan = _twops_plan(self.L, self.R)
        U, C, keep = plan.U, plan.C, plan.keep
        k = self.k
        buf: dict[int, _Strip | None] = {j: None for j in range(1, k + 1)}
        carry: dict[int, _Strip | None] = {j: None for j in range(k)}
        done: list[_Strip] = []
        kept_rows = []
        for r in range(1, self.R + 1):
            final = r == self.R
            z = self.em.gate(gate_src)
            x0 = self.x0
            # forward: new rows of every needed T_j, appended to what the previous block kept
            for li in range(k):
                j = li + 1
                if not (j < k or _reads_y(self.L[li])) or U[j][r] == U[j][r - 1]:
                    continue
                a, b = U[j][r - 1], U[j][r]
                if li == 0:
                    ia, ib = self.L[0].need(a, b)
                    src = self.em.rows(x0, ia, ib, self.shape(0), gate=z)
                else:
                    src = buf[li]
                new, _ = self.fwd(li, src, a, b)
                buf[j] = self._append_rows(buf[j], new, j, "buf")
            # backward
            last = None
            g: _Strip | None = None
            if C[k][r] > C[k][r - 1]:
                g = self.em.rows(self.dy, C[k][r - 1], C[k][r], self.shape(k), gate=z)
            for li in range(k - 1, -1, -1):
                if g is None:
                    break
                want = li > 0 or self.need_dx0
                if li == 0:
                    ia, ib = self.L[0].need(g.start, g.end)
                    x = self.em.rows(x0, ia, ib, self.shape(0), gate=z)
                else:
                    x = buf[li]
                part = self.bwd(li, g, x, buf.get(li + 1), None, final, want)
                if part is None:
                    last = self._last_param_grad(li)
                    g = None
                    break
                comb = part if carry[li] is None else self.em.add(carry[li], part, self.shape(li))
                lo, hi = C[li][r - 1], C[li][r]
                carry[li] = self.em.rows(comb, hi, comb.end, self.shape(li)) if comb.end > hi else None
                g = self.em.rows(comb, lo, hi, self.shape(li)) if hi > lo else None
                last = g.name if g is not None else (carry[li].name if carry[li] is not None else part.name)
                if li == 0 and g is not None:
                    done.append(g)
                    g = None
            # what later blocks still read, trimmed from this block's buffers
            sources = [last] if last else []
            row_count = []
            for j in range(1, k + 1):
                if buf[j] is None:
                    continue
                ks = max(keep[j][r], buf[j].start)
                if r == self.R or ks >= buf[j].end:
                    buf[j] = None
                    row_count.append(0)
                    continue
                if ks > buf[j].start:
                    buf[j] = self.em.rows(buf[j], ks, buf[j].end, self.shape(j))
                sources.append(buf[j].name)
                row_count.append(buf[j].end - buf[j].start)
            for cr in carry.values():
                if cr is not None:
                    sources.append(cr.name)
            kept_rows.append(row_count)
            gate_src = sources or gate_src
        if self.need_dx0:
            self._assemble_dx0(done, None)
        return {"splits": U[k], "kept_rows": kept_rows}


# ------------------------------------------------------------------------------------------- the pass

class RowSplitPass(GraphPass):
    """Row-split conv chains (LR-CNN). rows: R blocks per segment (int >= 1) or "auto" (needs budget_bytes);
    variant: "overl" | "2ps"; checkpoints: "auto" | N segments per chain."""

    name = "row_split"

    def __init__(self, rows: int | str = 2, variant: str = "overl", checkpoints: int | str = "auto",
                 budget_bytes: int | None = None, split_forward: bool = False,
                 accumulate_in_place: bool = True) -> None:
        if isinstance(rows, str) and rows != "auto":
            try:
                rows = int(rows)
            except ValueError:
                raise OnnxcompError(f"rows={rows!r}: use an integer >= 1 or 'auto'") from None
        if rows != "auto" and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise OnnxcompError(f"rows={rows!r}: use an integer >= 1 or 'auto'")
        if rows == "auto" and not budget_bytes:
            raise OnnxcompError("rows='auto' needs a memory budget (budget_bytes / --budget)")
        variant = str(variant).lower()
        if variant not in VARIANTS:
            raise OnnxcompError(f"variant={variant!r}: choose one of {', '.join(VARIANTS)}")
        if isinstance(checkpoints, str) and checkpoints != "auto":
            try:
                checkpoints = int(checkpoints)
            except ValueError:
                raise OnnxcompError(f"checkpoints={checkpoints!r}: use 'auto' or an integer >= 1") from None
        if checkpoints != "auto" and (isinstance(checkpoints, bool) or checkpoints < 1):
            raise OnnxcompError(f"checkpoints={checkpoints!r}: use 'auto' or an integer >= 1")
        if budget_bytes is not None and budget_bytes <= 0:
            raise OnnxcompError(f"budget_bytes={budget_bytes}: must be positive")
        self.rows = rows
        self.variant = variant
        self.checkpoints = checkpoints
        self.budget_bytes = budget_bytes
        self.split_forward = bool(split_forward)
        self.accumulate_in_place = bool(accumulate_in_place)

    def run(self, model: onnx.ModelProto) -> PassResult:
        require_training_graph(model)
        if self.rows != "auto":
            result = self._rewrite(model, int(self.rows))
            tallest = max((r["output_rows"] for r in result.records), default=None)
            if tallest is not None and int(self.rows) > tallest:  # would be clamped to each chain's height
                raise OnnxcompError(f"rows={self.rows}: the tallest row-split chain has {tallest} output rows; "
                                    f"use --rows <= {tallest} or 'auto'")
            return result
        tried = []
        best: tuple[int, int, PassResult] | None = None
        for R in _AUTO_R_CANDIDATES:
            result = self._rewrite(model, R)
            if not result.records:
                return result
            peak = predicted_peak(result.model)
            tried.append({"rows": R, "predicted_peak_bytes": peak})
            if best is None or peak < best[1]:
                best = (R, peak, result)
            if peak <= self.budget_bytes:
                best = (R, peak, result)
                break
            if R >= max(r["output_rows"] for r in result.records):
                break
        assert best is not None
        R, peak, result = best
        for rec in result.records:
            rec["auto"] = {"budget_bytes": self.budget_bytes, "chosen_rows": R, "predicted_peak_bytes": peak,
                           "fits": peak <= self.budget_bytes, "tried": tried}
        return result

    def _rewrite(self, model: onnx.ModelProto, R: int) -> PassResult:
        analysis = analyze_model(model)
        chains, skipped = _find_chains(analysis)
        result = PassResult(self.copy(model), skipped=skipped)
        if not chains:
            return result
        out = result.model
        graph = out.graph
        taken = taken_names(graph)
        wshapes = {n: t.shape for n, t in analysis.tensors.items() if t.shape is not None}
        nodes = list(graph.node)
        index_of = {id(n): i for i, n in enumerate(model.graph.node)}
        replace: dict[int, list[onnx.NodeProto]] = {}   # original index of first removed node -> new nodes
        remove: set[int] = set()
        value_info: list[onnx.ValueInfoProto] = []
        drop_idx_outputs: set[int] = set()
        for ci, chain in enumerate(chains):
            chain.segments = _choose_segments(chain.layers, R, self.variant, self.checkpoints)
            seg_records = []
            for si, (i, j) in enumerate(reversed(chain.segments)):     # top segment first (backward order)
                layers = chain.layers[i:j]
                R_seg = max(1, min(R, layers[-1].h_out))
                em = _Emitter(out, taken, f"onnxcomp_rows/c{ci}s{len(chain.segments) - 1 - si}")
                accs = {}
                if self.accumulate_in_place:
                    for lay in layers:
                        for g in lay.grad.output[1:3]:
                            ipa = _sole_accumulator(analysis, g)
                            if ipa is not None:
                                accs[g] = model.graph.node[ipa]
                                remove.add(ipa)
                writer = _SegmentWriter(em, layers, R_seg, wshapes, accs)
                dy_name = layers[-1].y + "_grad"
                info = writer.overl([dy_name]) if self.variant == "overl" else writer.twops([dy_name])
                writer.finish_params()
                fwd_split = self.split_forward and len(layers) > 1
                if fwd_split:
                    fem = _Emitter(out, taken, f"onnxcomp_rows/c{ci}s{len(chain.segments) - 1 - si}f")
                    fem._consts = em._consts
                    writer.em = fem
                    writer.forward_split(self.variant)
                    fwd_idx = [index_of[id(lay.fwd)] for lay in layers]
                    remove.update(fwd_idx)
                    replace[min(fwd_idx)] = fem.nodes
                    value_info += fem.value_info
                grads = [index_of[id(lay.grad)] for lay in layers]
                first = min(grads)
                remove.update(grads)
                replace[first] = em.nodes
                value_info += em.value_info
                for lay in layers:
                    if lay.kind == "MaxPool":
                        drop_idx_outputs.add(index_of[id(lay.fwd)])
                seg_records.append({
                    "layers": [lay.fwd.name or lay.y for lay in layers], "input": layers[0].x,
                    "rows": R_seg, "output_rows": layers[-1].h_out,
                    "dropped_stash_bytes": _internal_stash_bytes(layers, 0, len(layers)),
                    "predicted_block_bytes": _block_bytes(layers, R_seg, self.variant),
                    "recomputed_rows": em.recomputed_rows, "forward_split": fwd_split,
                    "original_rows": sum(lay.h_out for lay in layers),
                    **info,
                })
            seg_records.reverse()
            dropped = sum(s["dropped_stash_bytes"] for s in seg_records)
            kept = {chain.layers[i].x for i, _ in chain.segments}
            stashed = {st.name for st in analysis.stashed}
            dropped_names = [t for lay in chain.layers for t in [lay.y] + list(lay.fwd.output[1:2])
                             if t in stashed and t not in kept and t != chain.layers[-1].y]
            ckpt = sum(chain.layers[i].row_bytes("x") * chain.layers[i].h_in for i, _ in chain.segments[1:])
            result.records.append({
                "tensor": chain.layers[0].x, "pattern": "row-split", "encoding": "rows", "chain": chain.name,
                "nodes": [lay.fwd.name or lay.y for lay in chain.layers], "variant": self.variant,
                "rows": R, "output_rows": max(s["output_rows"] for s in seg_records),
                "checkpoints": [chain.layers[i].x for i, _ in chain.segments],
                "dropped_stashes": dropped_names,
                "segments": seg_records, "original_bytes": dropped + ckpt,
                "predicted_bytes": ckpt + max(s["predicted_block_bytes"] for s in seg_records),
                "halos": [s.get("halo_rows") or s.get("kept_rows") for s in seg_records],
            })
        new_nodes: list[onnx.NodeProto] = []
        for i, n in enumerate(nodes):
            if i in replace:
                new_nodes.extend(replace[i])
            if i in remove:
                continue
            if i in drop_idx_outputs and len(n.output) > 1:
                still_read = any(n.output[1] in m.input for k_, m in enumerate(nodes) if k_ not in remove)
                if not still_read:
                    del n.output[1:]
            new_nodes.append(n)
        del graph.node[:]
        graph.node.extend(_stable_toposort(new_nodes, {i.name for i in graph.input} |
                                           {i.name for i in graph.initializer}))
        graph.value_info.extend(value_info)
        return result


def _stable_toposort(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Node order kept wherever it is valid; a node that reads a tensor produced later (e.g. an
    accumulator an earlier pass moved right after the ConvGrad this pass replaced) moves down to just
    after its last producer."""
    import heapq

    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting: dict[int, set[int]] = {}
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        deps = {producer[t] for t in n.input if t and t not in available and t in producer and producer[t] != i}
        waiting[i] = deps
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, d in waiting.items() if not d]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users.get(i, []):
            waiting[u].discard(i)
            if not waiting[u]:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        raise OnnxcompError("row-split produced a cyclic graph (internal error)")
    return out


def _sole_accumulator(analysis: GraphAnalysis, grad: str) -> int | None:
    """The InPlaceAccumulatorV2 that is the only reader of a weight gradient (ORT's gradient accumulation)."""
    t = analysis.tensors.get(grad) if grad else None
    if t is None or len(t.consumers) != 1:
        return None
    node = analysis.model.graph.node[t.consumers[0]]
    if node.op_type != "InPlaceAccumulatorV2" or len(node.input) < 3 or node.input[1] != grad or len(node.output) != 1:
        return None
    return t.consumers[0]


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
    from ..planner.buffers import live_bytes

    if eager_accumulation:
        from .eager_accumulation import EagerAccumulationPass

        model = EagerAccumulationPass().run(model).model
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


def conv_grad_workspace(analysis: GraphAnalysis, node: onnx.NodeProto) -> int:
    """Bytes of the im2col buffer ORT's CPU ConvGrad allocates for one image (0 for other ops)."""
    if node.op_type != "ConvGrad":
        return 0
    dy, w = analysis.tensors.get(node.input[0]), analysis.tensors.get(node.input[2])
    if dy is None or w is None or dy.shape is None or w.shape is None:
        return 0
    return int(np.prod(w.shape[1:], dtype=np.int64) * np.prod(dy.shape[2:], dtype=np.int64)) * 4
