"""Emitting a segment's row-by-row backward (both variants) as onnx-ir nodes, with the graph editor.

The segment writer decides which rows each block slices, recomputes and back-propagates; every node it
makes comes from ``IrGraphEditor`` (names under the segment's prefix, typed outputs, initializers, the
ordering gate). Nodes are collected on the editor; the pass places them (``RowSplitPass``). A new node that
takes the place of an original tensor (a weight gradient, an accumulator's flag, the chain input's gradient,
the forward output) is recorded in ``takeovers``: the pass moves the original's readers (graph outputs
included) to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from ...analysis import GraphAnalysis
from ...errors import OnnxcompError
from ..base import even_bounds
from ..editor import IrGraphEditor, stable_toposort
from .geometry import GRAD_OPS, MS_DOMAIN, Layer
from .schedule import _overl_windows, _reads_y, _twops_plan

FLOAT, INT64, BOOL = ir.DataType.FLOAT, ir.DataType.INT64, ir.DataType.BOOL
# ConstantOfShape's fill value, as the protobuf tensor the original pass wrote (kept byte for byte).
_ZERO_FILL = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])


@dataclass
class _Strip:
    """A value holding rows [start, end) of some NCHW tensor (None: no rows at all)."""
    value: ir.Value | None
    start: int
    end: int


@dataclass
class Takeover:
    """``new`` replaces the original tensor ``old``: same name, same readers (graph outputs included)."""
    old: ir.Value
    new: ir.Value


def _named(v: ir.Value | None) -> bool:
    return v is not None and bool(v.name)


def _clone_attrs(node: ir.Node, top: int, bottom: int) -> dict[str, ir.Attr]:
    """``node``'s attributes with the row padding replaced by the semi-closed pads of a block."""
    attrs: dict[str, ir.Attr] = {}
    for name, a in node.attributes.items():
        if name == "pads":
            p = list(a.value)
            attrs[name] = ir.AttrInt64s("pads", [top, p[1], bottom, p[3]])
        elif name == "auto_pad":
            attrs[name] = ir.AttrString("auto_pad", "NOTSET")
        else:
            attrs[name] = ir.Attr(name, a.type, a.value, doc_string=a.doc_string)
    if node.op_type in ("Conv", "ConvGrad", "MaxPool", "MaxPoolGrad", "AveragePool", "AveragePoolGrad") and \
            "pads" not in node.attributes:
        attrs["pads"] = ir.AttrInt64s("pads", [top, 0, bottom, 0])
    return attrs


@dataclass
class _Segment:
    """What the writer needs about one segment of a chain."""
    layers: list[Layer]
    R: int
    analysis: GraphAnalysis
    accumulators: dict[ir.Value, ir.Node] = field(default_factory=dict)   # weight gradient -> its sole IPA


class SegmentWriter:
    """Writes one segment's replacement backward (``overl`` / ``twops``), the weight gradients' hand-over
    (``finish_params``) and optionally its row-by-row forward (``forward_split``)."""

    def __init__(self, editor: IrGraphEditor, segment: _Segment) -> None:
        self.ed = editor
        self.consts: dict[tuple, ir.Value] = {}      # int64 constants of this segment, by value
        self.false: ir.Value | None = None
        self.takeovers: list[Takeover] = []
        self.recomputed_rows = 0
        self.analysis = segment.analysis
        self.accumulators = segment.accumulators
        self.flags: dict[ir.Value, ir.Value] = {}     # weight gradient -> the last block's accumulator flag
        self.L = segment.layers
        self.R = segment.R
        self.k = len(self.L)
        self.dW: dict[int, list[ir.Value | None]] = {}   # layer -> running [dW, dB] sums
        self.x0 = _Strip(self.L[0].x, 0, self.L[0].h_in)
        self.dy = _Strip(self.L[-1].grad.inputs[0], 0, self.L[-1].h_out)     # "<y>_grad" (chains.backward_op)
        self.need_dx0 = _named(self.L[0].grad.outputs[0])

    # ------------------------------------------------------------------ editor calls
    def shape(self, j: int) -> tuple[int, ...]:
        return self.L[0].x_shape if j == 0 else self.L[j - 1].y_shape

    def _out(self, base: str, shape: list[int] | None, elem: ir.DataType = FLOAT) -> tuple[str, ir.DataType, Any]:
        return self.ed.name(base), elem, shape

    def _node(self, op: str, inputs: list[ir.Value | None], outputs: list[tuple], domain: str = "",
              **attrs: Any) -> ir.Node:
        return self.ed.node(op, inputs, outputs, name=self.ed.name(op), domain=domain, **attrs)

    def _const(self, values: list[int]) -> ir.Value:
        key = tuple(values)
        if key not in self.consts:
            name = f"onnxcomp_rows_c_{'_'.join(str(v).replace('-', 'm') for v in values)}"
            self.consts[key] = self.ed.initializer(name, np.array(values, dtype=np.int64))
        return self.consts[key]

    def _false(self) -> ir.Value:
        if self.false is None:
            self.false = self.ed.initializer("onnxcomp_rows_false", np.array([False]))
        return self.false

    def _gate(self, sources: list[ir.Value]) -> ir.Value:
        """A zero that exists only once every (float) source does: the editor's one gating idiom, as the
        offset a row Slice adds to its start and end."""
        return self.ed.zero_after_all(sources, FLOAT, base=f"{self.ed.prefix}{self.ed.sep}gate")

    def _into(self, op: str, inputs: list[ir.Value], old: ir.Value, **attrs: Any) -> None:
        """``op(inputs)`` taking the place of the original tensor ``old``."""
        node = self._node(op, inputs, [(old.name, FLOAT, None)], **attrs)
        node.outputs[0].type, node.outputs[0].shape = old.type, old.shape     # what the graph knew of it
        self.takeovers.append(Takeover(old, node.outputs[0]))

    def _rows(self, src: _Strip, a: int, b: int, shape: tuple[int, ...], gate: ir.Value | None = None) -> _Strip:
        """Rows [a, b) of a strip (zeros where the strip has none), optionally gated."""
        if a >= b:
            raise OnnxcompError(f"row-split: empty row range [{a}, {b}) requested")
        lo, hi = max(a, src.start), min(b, src.end)
        n, c, _, w = shape
        if lo >= hi:
            z = self._out("zeros", [n, c, b - a, w])
            node = self._node("ConstantOfShape", [self._const([n, c, b - a, w])], [z],
                              value=ir.serde.TensorProtoTensor(_ZERO_FILL))
            return _Strip(node.outputs[0], a, b)
        t = src.value
        if lo != src.start or hi != src.end or gate is not None:
            starts, ends = self._const([lo - src.start]), self._const([hi - src.start])
            if gate is not None:
                s2, e2 = self._out("start", [1], INT64), self._out("end", [1], INT64)
                starts = self._node("Add", [starts, gate], [s2]).outputs[0]
                ends = self._node("Add", [ends, gate], [e2]).outputs[0]
            out = self._out("rows", [n, c, hi - lo, w])
            t = self._node("Slice", [src.value, starts, ends, self._const([2])], [out]).outputs[0]
        if lo > a or hi < b:
            p = self._out("padded", [n, c, b - a, w])
            t = self._node("Pad", [t, self._const([0, 0, lo - a, 0, 0, 0, b - hi, 0])], [p], mode="constant").outputs[0]
        return _Strip(t, a, b)

    def _add(self, x: _Strip, y: _Strip, shape: tuple[int, ...]) -> _Strip:
        a, b = min(x.start, y.start), max(x.end, y.end)
        xs, ys = self._rows(x, a, b, shape), self._rows(y, a, b, shape)
        n, c, _, w = shape
        o = self._out("sum", [n, c, b - a, w])
        return _Strip(self._node("Add", [xs.value, ys.value], [o]).outputs[0], a, b)

    def _clone(self, like: ir.Node, op: str, domain: str, inputs: list[ir.Value | None], outputs: list[tuple],
               top: int, bottom: int) -> ir.Node:
        """A copy of ``like`` (forward op or its backward op) on a block's rows, with semi-closed pads."""
        return self._node(op, inputs, outputs, domain=domain, **_clone_attrs(like, top, bottom))

    # ------------------------------------------------------------------ one layer, forward and backward
    def fwd(self, li: int, x: _Strip, a: int, b: int, with_idx: bool = True) -> tuple[_Strip, ir.Value | None]:
        """Layer li's output rows [a, b) from a strip holding (at least) the rows they need."""
        lay = self.L[li]
        ia, ib, top, bottom = lay.pads(a, b)
        xin = self._rows(x, ia, ib, self.shape(li)) if (x.start, x.end) != (ia, ib) else x
        n, c, _, w = lay.y_shape
        outs = [self._out(f"{lay.kind}_y", [n, c, b - a, w])]
        if lay.kind == "MaxPool" and with_idx:
            outs.append(self._out("MaxPool_idx", [n, c, b - a, w], INT64))
        node = self._clone(lay.fwd, lay.kind, lay.fwd.domain, [xin.value, *lay.fwd.inputs[1:]], outs, top, bottom)
        self.recomputed_rows += b - a
        return _Strip(node.outputs[0], a, b), (node.outputs[1] if len(outs) > 1 else None)

    def bwd(self, li: int, dy: _Strip, x: _Strip | None, y: _Strip | None, idx: ir.Value | None,
            want_dx: bool = True) -> _Strip | None:
        """Backward of layer li for output-gradient rows dy: the partial input gradient over the window."""
        lay = self.L[li]
        a, b = dy.start, dy.end
        ia, ib, top, bottom = lay.pads(a, b)
        n, c, _, w = lay.x_shape
        dx = self._out(f"{lay.kind}_dx", [n, c, ib - ia, w]) if want_dx else ("", FLOAT, None)
        gtype, gdom = GRAD_OPS[lay.kind]
        if lay.kind == "Conv":
            assert x is not None
            xin = self._rows(x, ia, ib, self.shape(li)) if (x.start, x.end) != (ia, ib) else x
            node = self._conv_grad(li, dy, xin, dx, top, bottom)
        elif lay.kind in ("Relu", "LeakyRelu"):
            src = y if lay.grad_reads_y else x
            assert src is not None
            src = self._rows(src, a, b, lay.y_shape if src is y else self.shape(li)) \
                if (src.start, src.end) != (a, b) else src
            node = self._clone(lay.grad, gtype, gdom, [dy.value, src.value], [dx], 0, 0)
        elif lay.kind == "MaxPool":
            if idx is None:     # 2PS: the backward window differs from the forward one: re-pool it
                assert x is not None
                _, idx = self.fwd(li, x, a, b)
            node = self._clone(lay.grad, gtype, gdom, [dy.value, idx], [dx], top, bottom)
        else:  # AveragePool
            node = self._clone(lay.grad, gtype, gdom, [dy.value], [dx], top, bottom)
        return _Strip(node.outputs[0], ia, ib) if want_dx else None

    def _conv_grad(self, li: int, dy: _Strip, xin: _Strip, dx: tuple, top: int, bottom: int) -> ir.Node:
        """ConvGrad on a block's rows; its weight/bias gradients go straight into the optimizer's gradient
        buffer (an InPlaceAccumulatorV2 per block) or into a running sum."""
        lay = self.L[li]
        gtype, gdom = GRAD_OPS[lay.kind]
        weight = lay.fwd.inputs[1]
        wshape = list(self.analysis.tensors[weight.name].shape)
        has_b = len(lay.grad.outputs) > 2 and _named(lay.grad.outputs[2])
        orig: list[ir.Value | None] = list(lay.grad.outputs) + [None] * (3 - len(lay.grad.outputs))
        first = li not in self.dW
        outs = [self._out("dW" if k_ == 0 else "dB", shp) if _named(orig[1 + k_]) else ("", FLOAT, None)
                for k_, shp in enumerate((wshape, [wshape[0]]))]
        node = self._clone(lay.grad, gtype, gdom, [dy.value, xin.value, weight],
                           [dx, outs[0], outs[1] if has_b else ("", FLOAT, None)], top, bottom)
        names = [node.outputs[1] if _named(orig[1]) else None,
                 node.outputs[2] if _named(orig[2]) and has_b else None]
        acc = self.dW.get(li, [None, None])
        new: list[ir.Value | None] = []
        for k_, (prev, cur) in enumerate(zip(acc, names)):
            ipa = self.accumulators.get(orig[1 + k_]) if cur is not None else None  # type: ignore[arg-type]
            shp = wshape if k_ == 0 else [wshape[0]]
            if ipa is not None:
                # Straight into the optimizer's gradient buffer: no running sum lives across blocks.
                buf_in, flag = (ipa.inputs[0], ipa.inputs[2]) if first else (prev, self._false())
                buf_out = self._out("grad_buffer", shp)
                done = self._out("accumulated", [1], BOOL)
                acc_node = self._node("InPlaceAccumulatorV2", [buf_in, cur, flag], [done, buf_out], domain=MS_DOMAIN)
                self.flags[orig[1 + k_]] = acc_node.outputs[0]  # type: ignore[index]
                new.append(acc_node.outputs[1])
            elif cur is None or first:
                new.append(cur if cur is not None else prev)
            else:
                o = self._out("dW_acc" if k_ == 0 else "dB_acc", shp)
                new.append(self._node("Add", [prev, cur], [o]).outputs[0])
        self.dW[li] = new
        return node

    def _append_rows(self, held: _Strip | None, new: _Strip, j: int, base: str) -> _Strip:
        """Layer j's rows held so far with ``new`` (the rows right below them) appended: one Concat."""
        if held is None:
            return new
        n_, c_, _, w_ = self.shape(j)
        cat = self._out(base, [n_, c_, new.end - held.start, w_])
        return _Strip(self._node("Concat", [held.value, new.value], [cat], axis=2).outputs[0], held.start, new.end)

    def finish_params(self) -> None:
        """The summed weight/bias gradients under the names the optimizer's accumulators read (or, when the
        blocks accumulated straight into the gradient buffers, the accumulators' flag outputs)."""
        for li, names in self.dW.items():
            orig = list(self.L[li].grad.outputs) + [None] * 3
            for k_, v in enumerate(names):
                old = orig[1 + k_]
                if v is None or not _named(old):
                    continue
                ipa = self.accumulators.get(old)
                if ipa is not None:
                    self._into("Identity", [self.flags[old]], ipa.outputs[0])
                else:
                    self._into("Identity", [v], old)

    # ------------------------------------------------------------------ forward, row by row (LR-CNN FP)
    def forward_split(self, variant: str) -> None:
        """Replace the segment's forward ops: its output is assembled (one Concat) from per-block rows, so
        only one block's intermediates exist at a time in the forward pass too."""
        k, R = self.k, self.R
        sp = even_bounds(self.L[-1].h_out, R)
        strips: list[_Strip] = []
        gate_src: list[ir.Value] = []
        if variant == "overl":
            for r in range(1, R + 1):
                w = _overl_windows(self.L, sp[r - 1], sp[r])
                z = self._gate(gate_src) if gate_src else None
                cur = self._rows(self.x0, *w[0], self.shape(0), gate=z)
                for li in range(k):
                    cur, _ = self.fwd(li, cur, *w[li + 1], with_idx=False)
                strips.append(cur)
                gate_src = [cur.value]
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
                z = self._gate(gate_src) if gate_src else None
                for li in range(k):
                    j = li + 1
                    a, b = U[j][r - 1], U[j][r]
                    if a == b:
                        continue
                    src = self._rows(self.x0, *self.L[0].need(a, b), self.shape(0), gate=z) if li == 0 else buf[li]
                    new, _ = self.fwd(li, src, a, b, with_idx=False)
                    if j == k:
                        strips.append(new)
                    else:
                        buf[j] = self._append_rows(buf[j], new, j, "fbuf")
                gate_src = [strips[-1].value]
                for j in range(1, k):
                    held = buf[j]
                    if held is None:
                        continue
                    ks = max(keep[j][r], held.start)
                    if r == R or ks >= held.end:
                        buf[j] = None
                        continue
                    if ks > held.start:
                        buf[j] = held = self._rows(held, ks, held.end, self.shape(j))
                    gate_src.append(held.value)
        if len(strips) == 1:
            self._into("Identity", [strips[0].value], self.L[-1].y)
        else:
            self._into("Concat", [p.value for p in strips], self.L[-1].y, axis=2)

    # ------------------------------------------------------------------ OverL
    def overl(self) -> dict[str, Any]:
        sp = even_bounds(self.L[-1].h_out, self.R)
        pending: _Strip | None = None
        done: list[_Strip] = []
        halos = []
        gate_src = [self.dy.value]
        for r in range(1, self.R + 1):
            w = _overl_windows(self.L, sp[r - 1], sp[r])
            halos.append([b - a for a, b in w])
            z = self._gate(gate_src)
            T: dict[int, _Strip] = {0: self._rows(self.x0, *w[0], self.shape(0), gate=z)}
            idx: dict[int, ir.Value | None] = {}
            for li in range(self.k):
                if li + 1 < self.k or _reads_y(self.L[li]):
                    T[li + 1], idx[li] = self.fwd(li, T[li], *w[li + 1])
            g: _Strip | None = self._rows(self.dy, sp[r - 1], sp[r], self.shape(self.k), gate=z)
            last = g.value
            for li in range(self.k - 1, -1, -1):
                want = li > 0 or self.need_dx0
                g_new = self.bwd(li, g, T[li], T.get(li + 1), idx.get(li), want)
                last = g_new.value if g_new is not None else self._last_param_grad(li)
                g = g_new
            if self.need_dx0:
                assert g is not None
                # overlap-add into the pending strip; its rows above this block's window are final
                if pending is not None and g.start > pending.start:
                    done.append(self._rows(pending, pending.start, g.start, self.shape(0)))
                    pending = self._rows(pending, g.start, pending.end, self.shape(0)) \
                        if pending.end > g.start else None
                pending = g if pending is None else self._add(pending, g, self.shape(0))
                last = pending.value
            gate_src = [last]
        if self.need_dx0:
            self._assemble_dx0(done, pending)
        return {"halo_rows": halos, "splits": sp}

    def _last_param_grad(self, li: int) -> ir.Value:
        return next(v for v in self.dW.get(li, []) if v is not None)

    def _assemble_dx0(self, done: list[_Strip], pending: _Strip | None) -> None:
        H0 = self.L[0].h_in
        parts = done + ([pending] if pending is not None else [])
        # fill gaps (rows no output reads: zero gradient)
        full: list[_Strip] = []
        at = 0
        for p in parts:
            if p.start > at:
                full.append(self._rows(_Strip(None, 0, 0), at, p.start, self.shape(0)))
            full.append(p)
            at = p.end
        if at < H0:
            full.append(self._rows(_Strip(None, 0, 0), at, H0, self.shape(0)))
        target = self.L[0].grad.outputs[0]
        if len(full) == 1:
            self._into("Identity", [full[0].value], target)
        else:
            self._into("Concat", [p.value for p in full], target, axis=2)

    # ------------------------------------------------------------------ 2PS
    def twops(self) -> dict[str, Any]:
        plan = _twops_plan(self.L, self.R)
        U, C, keep = plan.U, plan.C, plan.keep
        k = self.k
        buf: dict[int, _Strip | None] = {j: None for j in range(1, k + 1)}
        carry: dict[int, _Strip | None] = {j: None for j in range(k)}
        done: list[_Strip] = []
        kept_rows = []
        gate_src: list[ir.Value] = [self.dy.value]
        for r in range(1, self.R + 1):
            z = self._gate(gate_src)
            x0 = self.x0
            # forward: new rows of every needed T_j, appended to what the previous block kept
            for li in range(k):
                j = li + 1
                if not (j < k or _reads_y(self.L[li])) or U[j][r] == U[j][r - 1]:
                    continue
                a, b = U[j][r - 1], U[j][r]
                if li == 0:
                    ia, ib = self.L[0].need(a, b)
                    src = self._rows(x0, ia, ib, self.shape(0), gate=z)
                else:
                    src = buf[li]
                new, _ = self.fwd(li, src, a, b)
                buf[j] = self._append_rows(buf[j], new, j, "buf")
            # backward
            last: ir.Value | None = None
            g: _Strip | None = None
            if C[k][r] > C[k][r - 1]:
                g = self._rows(self.dy, C[k][r - 1], C[k][r], self.shape(k), gate=z)
            for li in range(k - 1, -1, -1):
                if g is None:
                    break
                want = li > 0 or self.need_dx0
                if li == 0:
                    ia, ib = self.L[0].need(g.start, g.end)
                    x = self._rows(x0, ia, ib, self.shape(0), gate=z)
                else:
                    x = buf[li]
                part = self.bwd(li, g, x, buf.get(li + 1), None, want)
                if part is None:
                    last = self._last_param_grad(li)
                    g = None
                    break
                comb = part if carry[li] is None else self._add(carry[li], part, self.shape(li))
                lo, hi = C[li][r - 1], C[li][r]
                carry[li] = self._rows(comb, hi, comb.end, self.shape(li)) if comb.end > hi else None
                g = self._rows(comb, lo, hi, self.shape(li)) if hi > lo else None
                last = g.value if g is not None else (carry[li].value if carry[li] is not None else part.value)
                if li == 0 and g is not None:
                    done.append(g)
                    g = None
            # what later blocks still read, trimmed from this block's buffers
            sources = [last] if last is not None else []
            row_count = []
            for j in range(1, k + 1):
                held = buf[j]
                if held is None:
                    continue
                ks = max(keep[j][r], held.start)
                if r == self.R or ks >= held.end:
                    buf[j] = None
                    row_count.append(0)
                    continue
                if ks > held.start:
                    buf[j] = held = self._rows(held, ks, held.end, self.shape(j))
                sources.append(held.value)
                row_count.append(held.end - held.start)
            for cr in carry.values():
                if cr is not None:
                    sources.append(cr.value)
            kept_rows.append(row_count)
            gate_src = sources or gate_src
        if self.need_dx0:
            self._assemble_dx0(done, None)
        return {"splits": U[k], "kept_rows": kept_rows}


# ------------------------------------------------------------------------------------------- one chain

@dataclass
class GraphEdit:
    """What the emitted segments change, applied to the graph at once (``apply``). ``position``: the
    original node order."""
    position: dict[ir.Node, int]
    at: dict[ir.Node, list[ir.Node]] = field(default_factory=dict)   # original node -> new nodes in its place
    remove: set[ir.Node] = field(default_factory=set)
    takeovers: list[Takeover] = field(default_factory=list)
    pools: list[ir.Node] = field(default_factory=list)   # forward MaxPools whose indices may now be unread

    def apply(self, graph: ir.Graph) -> None:
        """New nodes where the first node they replace was, the replaced nodes gone, the original tensors'
        readers moved to their new producers, unread MaxPool indices left out, then the node order made
        valid again with as few moves as possible."""
        order = []
        for node in graph:
            order += self.at.get(node, [])
            if node not in self.remove:
                order.append(node)
        for t in self.takeovers:
            t.old.replace_all_uses_with(t.new, replace_graph_outputs=True)
        graph.remove(self.remove, safe=True)
        for pool in self.pools:
            if pool.graph is graph and len(pool.outputs) > 1 and not pool.outputs[1].uses() \
                    and pool.outputs[1] not in graph.outputs:
                pool.outputs[1].name = ""     # an unnamed trailing output is left out (ONNX's optional output)
        order = stable_toposort(order, "row-split")
        graph.remove(list(graph))             # not "safe": the nodes keep their wiring, only the order changes
        graph.extend(order)


def emit_segment(editor: IrGraphEditor, analysis: GraphAnalysis, layers: list[Layer], R: int, variant: str,
                 accumulate_in_place: bool, edit: GraphEdit) -> tuple[SegmentWriter, dict[str, Any]]:
    """One segment's row-by-row backward (its nodes on ``editor``), registered in ``edit``: the layers'
    backward ops (and the accumulators the blocks now update themselves) replaced. Returns the writer (for
    the forward split) and the variant's schedule facts for the record."""
    accumulators: dict[ir.Value, ir.Node] = {}
    if accumulate_in_place:
        from .chains import sole_accumulator

        for lay in layers:
            for g in lay.grad.outputs[1:3]:
                ipa = sole_accumulator(g)
                if ipa is not None:
                    accumulators[g] = ipa
                    edit.remove.add(ipa)
    writer = SegmentWriter(editor, _Segment(layers, R, analysis, accumulators))
    info = writer.overl() if variant == "overl" else writer.twops()
    writer.finish_params()
    # A block's recomputed MaxPool is read for its indices only: its values, unread, would stay allocated to the
    # end of the step (ORT frees a buffer after its last reader), one per block.
    editor.release_unread(keep={t.new for t in writer.takeovers})
    edit.remove.update(lay.grad for lay in layers)
    edit.at[min((lay.grad for lay in layers), key=edit.position.__getitem__)] = editor.nodes
    edit.takeovers += writer.takeovers
    edit.pools += [lay.fwd for lay in layers if lay.kind == "MaxPool"]
    return writer, info


def emit_forward_split(writer: SegmentWriter, editor: IrGraphEditor, variant: str, edit: GraphEdit) -> None:
    """The segment's forward row by row (nodes on ``editor``, constants shared with the backward's)."""
    takeovers = len(writer.takeovers)
    writer.ed = editor
    writer.forward_split(variant)
    editor.release_unread(keep={t.new for t in writer.takeovers[takeovers:]})
    layers = writer.L
    edit.remove.update(lay.fwd for lay in layers)
    edit.at[min((lay.fwd for lay in layers), key=edit.position.__getitem__)] = editor.nodes
    edit.takeovers += writer.takeovers[takeovers:]
