"""Pass: a ConvGrad whose im2col workspace is large runs as input-channel blocks.

Why: ORT's CPU ConvGrad allocates, per call, an im2col buffer of (C_in/group)·kh·kw × H_out·W_out floats —
one image's worth, whatever the batch. Batch chunking (the chunked input chain) shrinks every map but not this:
on wide_resnet_s (batch 8, 40×40) the first block's 64→64 3×3 ConvGrad holds a 3.5 MiB buffer, the floor of
the chunked chain's backward (docs/notes/suite4x.md, NOTES-widesuite.md).

How: the input channels are independent in both of ConvGrad's products. For a block c ⊂ C_in,
``dW[:, c] = dY ⋆ X[:, c]`` and ``dX[:, c] = Wᵀ[:, c] ⋆ dY`` read only X's and W's channels c. So

    for each block j:  dX_j, dW_j [, dB] = ConvGrad(dY, X[:, c_j], W[:, c_j])     (dB from block 0 only)
    dX = Concat(dX_j, axis=1);  dW = Concat(dW_j, axis=1)

each with an im2col buffer 1/p the size. Extra memory: one X block (a copy, made just before its ConvGrad) and
the blocks of dX and dW until their Concat (one extra dX, one extra dW): a ConvGrad is split only
where the workspace saved is larger (batch-chunked ConvGrads, whose maps are small beside the one-image
buffer). The blocks run in order (each X
slice waits on the previous block's dW), so one workspace is alive at a time under either execution order.

With ``dx_by_conv`` (the budget planner's ORT-defaults mode prices it, planner/growth_budget.py): the blocks compute
dW only, and dX is one Conv over the flipped, transposed weights (passes/conv_transpose_as_conv.py: stride 1,
group 1) — no dX blocks and no dX Concat, so what the split adds is one X block at a time and the dW blocks;
the split is made wherever the workspace is above the limit (under ORT's defaults the workspace is arena
growth outside the pattern block, and on lossy densenet_s it made the arena hold the block twice).

Every output element is the same reduction as before (over output pixels for dW, over output channels for
dX), but not always summed in the same order: ORT's ConvGrad computes dW per image as one MLAS SGEMM
(M = C_out, N = C_in·kh·kw, K = output pixels) and MLAS cuts K into slices whose length depends on the column
range each thread gets (128 for a range over 64 columns, 256 / 512 / 1024 for narrower ones); a block narrower
than the whole can take another slice length and change the rounding of dW (measured: up to 4e-4 on 48×48 maps).
dX (SGEMM over C_out for each column, then col2im per channel) and dB came out bit-identical in every case tried.
With ``exact``, blocks are made only where the split probes bit-identical (``blocks_bit_identical``: the one
ConvGrad and its blocks run in ORT on seeded data, every output compared bit for bit, at each intra-op thread
count from 1 to this machine's default): the budget planner prices those for `--exact` plans. Grouped convs
are left alone.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np
import onnx_ir as ir

from ..errors import OnnxcompError
from .base import OnnxcompPass, PassOutcome, Skipped, even_bounds
from .chunk_input_block import _static, _take_over
from .editor import IrGraphEditor, ir_taken_names
from .records import PassRecord
from .split_weight import _slice

PATTERN = "ConvGrad (im2col workspace above the limit)"


def conv_grad_workspace_bytes(node: ir.Node) -> int:
    """ORT's CPU ConvGrad im2col buffer for one image: (C_in/group)·kh·kw × H_out·W_out floats (0 if a shape is
    unknown). The same formula as planner/predict.py's ``conv_grad_workspace``."""
    dy, w = _static(node.inputs[0]), _static(node.inputs[2])
    if dy is None or w is None:
        return 0
    return _workspace(tuple(dy), tuple(w))


def _workspace(dy: tuple[int, ...], w: tuple[int, ...]) -> int:
    return int(np.prod(w[1:], dtype=np.int64) * np.prod(dy[2:], dtype=np.int64)) * 4


def blocks_that_pay(dy: tuple[int, ...], x: tuple[int, ...], w: tuple[int, ...], needs_dx: bool,
                    limit: int) -> int:
    """How many input-channel blocks a ConvGrad of these shapes is split into at ``limit`` (0: none). Split
    only where the workspace saved is more than the blocks hold beyond the unsplit op: one X block, and the
    dX and dW blocks beside their Concats (one more dX, one more dW). A full-batch ConvGrad's dX usually
    outweighs it; a batch-chunked one's (the chunked input chain's) does not."""
    ws = _workspace(dy, w)
    if ws <= limit:
        return 0
    parts = min(int(x[1]), math.ceil(ws / limit))
    extra = (int(np.prod(x)) * 4 if needs_dx else 0) + int(np.prod(x)) * 4 // parts + int(np.prod(w)) * 4
    return parts if parts > 1 and ws - ws // parts > extra else 0


class SplitConvGradPass(OnnxcompPass):
    """``max_workspace_bytes``: the largest im2col buffer a ConvGrad may keep; larger ones are split into
    ``ceil(workspace / max)`` input-channel blocks (at most C_in)."""

    name = "split_conv_grad"

    def __init__(self, max_workspace_bytes: int, dx_by_conv: bool = False, exact: bool = False) -> None:
        if max_workspace_bytes <= 0:
            raise OnnxcompError(f"max_workspace_bytes must be > 0 (got {max_workspace_bytes})")
        if exact and dx_by_conv:
            raise OnnxcompError("SplitConvGradPass: exact=True cannot compute dX by a Conv (another summation "
                                "order); use dx_by_conv=False")
        self.max_workspace_bytes = max_workspace_bytes
        self.dx_by_conv = dx_by_conv
        # exact: split wherever the workspace is above the limit (the caller prices the graph), into the fewest
        # blocks that probe bit-identical; never where none does.
        self.exact = exact

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        taken = ir_taken_names(graph)
        flipped: dict[ir.Value, ir.Value] = {}      # one flipped weight per W (dx_by_conv)
        for grad in [n for n in graph if n.op_type == "ConvGrad"]:
            ws = conv_grad_workspace_bytes(grad)
            if ws <= self.max_workspace_bytes:
                continue
            why = _unsupported(grad)
            if why is None and _static(grad.inputs[0]) is None:
                why = "dY without a static shape"
            if why is not None:
                outcome.skipped.append(Skipped(grad.name, PATTERN, why))
                continue
            dx_pads = _conv_dx_pads(grad) if self.dx_by_conv else None
            bounds = None
            if self.exact:
                bounds = exact_blocks(grad, ws, self.max_workspace_bytes)
                if bounds is None:
                    outcome.skipped.append(Skipped(grad.name, PATTERN, "no input-channel blocks under the limit "
                                                   "give bit-identical gradients (MLAS slices dW's sums by the "
                                                   "block's width)"))
                    continue
                parts = len(bounds) - 1
            elif dx_pads is not None:
                # dX by one Conv: the blocks add one X block and the dW blocks; the caller priced that.
                parts = min(int(_static(grad.inputs[1])[1]), math.ceil(ws / self.max_workspace_bytes))
                parts = parts if parts > 1 else 0
            else:
                parts = blocks_that_pay(tuple(_static(grad.inputs[0])), tuple(_static(grad.inputs[1])),
                                        tuple(_static(grad.inputs[2])), bool(grad.outputs[0].name),
                                        self.max_workspace_bytes)
            if not parts:
                # A full-batch ConvGrad: its dX blocks and their Concat (one more dX) outweigh the workspace
                # saved. Batch-chunked ones (the chunked input chain's) are where it pays.
                outcome.skipped.append(Skipped(grad.name, PATTERN, "the blocks' copies outweigh the workspace "
                                                                   "saved"))
                continue
            label = grad.name or grad.outputs[1].name      # unnamed nodes: the weight gradient names it
            _split(graph, grad, bounds or even_bounds(_static(grad.inputs[1])[1], parts), taken, dx_pads, flipped)
            outcome.records.append(PassRecord(
                "blocked", self.name, label,
                {"conv_grad": label, "input_channel_blocks": parts, "workspace_bytes": ws,
                 "block_workspace_bytes": ws // parts, "dx_by_conv": dx_pads is not None, "exact": self.exact}))
        outcome.modified = bool(outcome.records)
        return outcome


def _unsupported(grad: ir.Node) -> str | None:
    if grad.attributes.get_int("group", 1) != 1:
        return "grouped conv (not handled)"
    x, w = _static(grad.inputs[1]), _static(grad.inputs[2])
    if x is None or w is None or len(x) != 4 or len(w) != 4:
        return "X or W without a static 4-D shape"
    if len(grad.inputs) != 3:
        return "unexpected inputs"
    return None


def _conv_dx_pads(grad: ir.Node) -> list[int] | None:
    """The pads of a Conv computing this ConvGrad's dX over flipped weights, or None where that does not apply
    (no dX wanted, strided, dilated-and-padded beyond the kernel, auto_pad; grouped ones are never split)."""
    from .conv_transpose_as_conv import conv_pads

    if not grad.outputs[0].name or _static(grad.inputs[0]) is None:
        return None
    a = grad.attributes
    if a.get_string("auto_pad", "NOTSET") not in ("NOTSET", "") or any(s != 1 for s in a.get_ints("strides", [1, 1])):
        return None
    w = _static(grad.inputs[2])
    return conv_pads(list(w[2:]), list(a.get_ints("pads", [0, 0, 0, 0])), list(a.get_ints("dilations", [1, 1])))


def _split(graph: ir.Graph, grad: ir.Node, bounds: list[int], taken: set[str],
           dx_pads: list[int] | None = None, flipped: dict[ir.Value, ir.Value] | None = None) -> None:
    from .conv_transpose_as_conv import flipped_weights

    dy, x, w = grad.inputs[:3]
    xs, ws = _static(x), _static(w)
    outs = list(grad.outputs) + [None] * (3 - len(grad.outputs))
    dx, dw, db = (o if o is not None and o.name else None for o in outs[:3])
    ed = IrGraphEditor(graph, taken, prefix=f"{grad.name or dw.name}_cin", sep="/")
    f32 = ir.DataType.FLOAT
    whole_dx = None
    if dx is not None and dx_pads is not None:
        # dX = Conv(dY, flip(W)ᵀ) once, before the blocks (MLAS's small segmented im2col, not ConvGrad's)
        a = grad.attributes
        whole_dx = ed.node("Conv", [dy, flipped_weights(ed, w, list(ws), flipped if flipped is not None else {})],
                           [(ed.name("dx_conv"), f32, list(xs))], name=ed.name("dx_Conv"), pads=dx_pads,
                           dilations=list(a.get_ints("dilations", [1, 1])), strides=[1, 1],
                           kernel_shape=list(ws[2:]), group=1).outputs[0]
        dx = None
    # dX as declared: where the reuse pass lifted it (passes/reuse_signature.py: the same elements under another
    # declared shape, e.g. [N, C, H, W, 1], that steers ORT's buffer reuse), the blocks and their Concat are
    # declared lifted the same way; a 4-D Concat under the lifted declaration made ORT fall back to a lenient shape
    # merge (warning "Error merging shape info") and drop the lift.
    dx_decl = list(xs)
    if dx is not None:
        declared = _static(dx)
        if (declared is not None and declared != list(xs) and len(declared) >= 2 and declared[:2] == list(xs[:2])
                and math.prod(declared) == math.prod(xs)):
            dx_decl = declared
    # Block j's slices of X and W wait on block j-1's dW (block 0's on dY): the copies are made when their
    # ConvGrad can run, not hoisted, and one block's workspace is alive at a time.
    dxs, dws, after = [], [], dy
    for j in range(len(bounds) - 1):
        lo, hi = bounds[j], bounds[j + 1]
        zero = ed.zero_after(after, ir.DataType.FLOAT, base=ed.name(f"gate{j}"))
        x_j = _slice(ed, ed.gate(x, after=after, shape=list(xs), zero=zero), lo, hi, 1, f"x{j}")
        x_j.shape = ir.Shape([xs[0], hi - lo, *xs[2:]])
        w_j = _slice(ed, ed.gate(w, after=after, shape=list(ws), zero=zero), lo, hi, 1, f"w{j}")
        w_j.shape = ir.Shape([ws[0], hi - lo, *ws[2:]])
        spec = [(ed.name(f"dx{j}"), f32, [dx_decl[0], hi - lo, *dx_decl[2:]]) if dx is not None else None,
                (ed.name(f"dw{j}"), f32, [ws[0], hi - lo, *ws[2:]]),
                (ed.name("db"), f32, [ws[0]]) if db is not None and j == 0 else None]
        while spec and spec[-1] is None:
            spec.pop()
        part = ed.clone(grad, [dy, x_j, w_j], spec, name=ed.name(f"ConvGrad{j}"))
        if dx is not None:
            dxs.append(part.outputs[0])
        dws.append(part.outputs[1])
        if db is not None and j == 0:
            _take_over(db, part.outputs[2])
        after = part.outputs[1]
    if dx is not None:
        total = ed.op("Concat", dxs, "dx", f32, dx_decl, axis=1)
        _take_over(dx, total)
    if whole_dx is not None:
        # the Conv's output is declared 4-D (what ORT infers for a Conv); a lifted dX declaration stays on a
        # Reshape view under dX's name (else ORT's lenient shape merge, as for the Concat above)
        ed.take_over_as_declared(outs[0], whole_dx)
    total_w = ed.op("Concat", dws, "dw", f32, list(ws), axis=1)
    _take_over(dw, total_w)
    graph.insert_before(grad, ed.nodes)
    graph.remove(grad, safe=True)


def exact_blocks(grad: ir.Node, workspace: int, limit: int) -> list[int] | None:
    """The channel bounds of the fewest even input-channel blocks (at least ``ceil(workspace / limit)``, at most
    twice that or C_in) whose split of ``grad`` probes bit-identical (``blocks_bit_identical``); None if none."""
    c_in = int(_static(grad.inputs[1])[1])
    first = math.ceil(workspace / limit)
    if first < 2 or first > c_in:
        return None
    a = grad.attributes
    attrs = (tuple(a.get_ints("pads", [0, 0, 0, 0])), tuple(a.get_ints("strides", [1, 1])),
             tuple(a.get_ints("dilations", [1, 1])), tuple(a.get_ints("kernel_shape", _static(grad.inputs[2])[2:])),
             a.get_string("auto_pad", "NOTSET") or "NOTSET")
    outs = tuple(i < len(grad.outputs) and bool(grad.outputs[i].name) for i in range(3))
    for parts in range(first, min(c_in, 2 * first) + 1):
        bounds = even_bounds(c_in, parts)
        if blocks_bit_identical(tuple(_static(grad.inputs[0])), tuple(_static(grad.inputs[1])),
                                tuple(_static(grad.inputs[2])), attrs, outs, tuple(bounds)):
            return bounds
    return None


def probe_thread_counts() -> tuple[int, ...]:
    """The intra-op thread counts the exact probe runs at: 1 to this machine's CPU count (ORT's default uses the
    cores; a user may set fewer), at most 8."""
    return tuple(range(1, min(os.cpu_count() or 1, 8) + 1))


@functools.lru_cache(maxsize=256)
def blocks_bit_identical(dy: tuple[int, ...], x: tuple[int, ...], w: tuple[int, ...], attrs: tuple,
                         outs: tuple[bool, bool, bool], bounds: tuple[int, ...]) -> bool:
    """Whether a ConvGrad of these shapes and attributes (pads, strides, dilations, kernel_shape, auto_pad),
    with these outputs wanted (dX, dW, dB), split at the input-channel ``bounds`` gives every output bit for bit
    what the one ConvGrad gives, in ORT on seeded data at every ``probe_thread_counts()``. A probe, not a proof:
    MLAS's slicing is a function of the shapes and the thread count only, not of the values, so seeded data
    that differs anywhere shows it; agreement on one draw is what we check."""
    import onnx
    import onnx.helper as oh
    import onnxruntime as ort

    pads, strides, dilations, kernel, auto_pad = attrs
    names = [n if want else "" for n, want in zip(("dx", "dw", "db"), outs)]
    while names and not names[-1]:
        names.pop()
    node = oh.make_node("ConvGrad", ["dy", "x", "w"], names, domain="com.microsoft", name="probe",
                        pads=list(pads), strides=list(strides), dilations=list(dilations),
                        kernel_shape=list(kernel), group=1, auto_pad=auto_pad)
    shapes = {"dx": x, "dw": w, "db": (w[0],)}
    f = onnx.TensorProto.FLOAT
    graph = oh.make_graph([node], "probe", [oh.make_tensor_value_info(n, f, s) for n, s in (("dy", dy), ("x", x),
                                                                                          ("w", w))],
                          [oh.make_tensor_value_info(n, f, shapes[n]) for n in names if n])
    ref = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)],
                        ir_version=8)
    model = ir.serde.deserialize_model(ref)
    g = model.graph
    _split(g, next(iter(g)), list(bounds), ir_taken_names(g))
    blocked = ir.serde.serialize_model(model)
    rng = np.random.default_rng(7)
    feeds = {"dy": rng.standard_normal(dy, dtype=np.float32), "x": rng.standard_normal(x, dtype=np.float32),
             "w": rng.standard_normal(w, dtype=np.float32)}
    wanted = [n for n in names if n]
    for threads in probe_thread_counts():
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        got = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(wanted, feeds)
               for m in (ref, blocked)]
        if not all(np.array_equal(a, b) for a, b in zip(*got)):
            return False
    return True
