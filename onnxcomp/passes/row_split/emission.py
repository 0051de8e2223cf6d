"""Emitting a segment's row-by-row backward (both variants) as ONNX nodes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx
from onnx import TensorProto, helper

from ...errors import OnnxcompError
from ..base import even_bounds, unique_name
from ..editor import GraphEditor
from .geometry import GRAD_OPS, MS_DOMAIN, Layer
from .schedule import _overl_windows, _reads_y, _twops_plan


@dataclass
class _Strip:
    """A tensor holding rows [start, end) of some NCHW tensor."""
    name: str
    start: int
    end: int


class _Emitter(GraphEditor):
    """The graph editor with the row-split's naming ("<prefix>/<op>") and its cached integer constants."""

    def __init__(self, model: onnx.ModelProto, taken: set[str], prefix: str) -> None:
        super().__init__(model.graph, taken, prefix, sep="/")
        self.model = model
        self._consts: dict[tuple, str] = {}
        self.recomputed_rows = 0

    @property
    def value_info(self) -> list[onnx.ValueInfoProto]:
        return self.infos

    def const(self, values: list[int], dtype: int = TensorProto.INT64) -> str:  # type: ignore[override]
        key = (tuple(values), dtype)
        if key not in self._consts:
            n = unique_name(f"onnxcomp_rows_c_{'_'.join(str(v).replace('-', 'm') for v in values)}", self.taken)
            self.model.graph.initializer.append(helper.make_tensor(n, dtype, [len(values)], values))
            self._consts[key] = n
        return self._consts[key]

    def vi(self, name: str, shape: list[int], elem: int = TensorProto.FLOAT) -> None:
        self.typed(name, elem, shape)

    def out(self, base: str, shape: list[int] | None, elem: int = TensorProto.FLOAT) -> str:
        n = self.name(base)
        if shape is not None:
            self.vi(n, shape, elem)
        return n

    def gate(self, sources: list[str]) -> str:  # type: ignore[override]
        """A zero that exists only once every (float) source does: the editor's one gating idiom, as the
        offset a row Slice adds to its start and end."""
        return self.zero_after([(s, TensorProto.FLOAT) for s in sources], base=f"{self.prefix}/gate")

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
