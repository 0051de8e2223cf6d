"""Pass: a stride-1 input gradient computed by Conv over flipped weights instead of ConvTranspose.

Why: under ORT's default session settings every kernel scratch buffer is taken from the CPU arena *outside* the
memory-pattern block P, and the pages it writes are growth (planner/ort_growth.py). ORT 1.19's CPU
ConvTranspose always asks for a one-image col buffer of (C_out/group)·kh·kw × ∏(input pixels) floats: 3.5 MiB
for a 64-channel 3×3 conv at 40×40 — the chunked input chain's dX of every chunk (passes/chunk_input_chain.py),
3.4–3.5 MiB of the lossy floor plans of wide_resnet_s and leaky_vgg (docs/notes/lossyfloor.md). ORT's Conv
kernel computes the same sums with MLAS's segmented im2col (128 KiB) wherever a group's filters do not
outnumber the output pixels.

How: for stride 1, ``ConvTranspose(dY, W; pads p, dilations d)`` equals ``Conv(dY, W'; pads d·(k-1) - p,
dilations d)`` with ``W' = Transpose(flip_hw(W), [1, 0, 2, 3])`` (W' is weight-sized: a few hundred KiB at
most, made once per weight and shared by every rewritten node reading it). Only group 1, no output padding or
explicit output shape, and pads at most d·(k-1) (else the Conv would need negative pads). The sums run in
another order (MLAS's Conv vs ConvTranspose's GEMM + col2im): not bit-identical, so transform uses it on
lossy graphs only (the chunked input chain, the only ConvTranspose onnxcomp emits, is lossy already).
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped
from .chunk_input_block import _static
from .editor import IrGraphEditor, ir_taken_names
from .records import PassRecord

PATTERN = "ConvTranspose (col buffer above the limit)"
INT64_MAX = (1 << 63) - 1


def conv_transpose_col_bytes(x: list[int] | tuple[int, ...], w: list[int] | tuple[int, ...], group: int = 1) -> int:
    """ORT's CPU ConvTranspose col buffer for one image (bytes): (C_out/group)·∏kernel × ∏(input pixels)
    floats, W being (C_in, C_out/group, k...) — ort_growth.conv_scratch's figure."""
    n = 1
    for d in w[1:]:
        n *= int(d)
    for d in x[2:]:
        n *= int(d)
    return 4 * n


def flipped_weights(ed: IrGraphEditor, w: ir.Value, shape: list[int], cache: dict[ir.Value, ir.Value]) -> ir.Value:
    """``Transpose(W[:, :, ::-1, ::-1], [1, 0, 2, 3])`` for a 4-D ``W`` (one per weight: ``cache``)."""
    if w in cache:
        return cache[w]
    starts = ed.shared_const("onnxcomp_flip_starts", [-1, -1])
    ends = ed.shared_const("onnxcomp_flip_ends", [-INT64_MAX, -INT64_MAX])
    axes = ed.shared_const("onnxcomp_flip_axes", [2, 3])
    steps = ed.shared_const("onnxcomp_flip_steps", [-1, -1])
    flipped = ed.op("Slice", [w, starts, ends, axes, steps], "w_flipped", ir.DataType.FLOAT, list(shape))
    out = ed.op("Transpose", [flipped], "w_transposed", ir.DataType.FLOAT,
                [shape[1], shape[0], *shape[2:]], perm=[1, 0, 2, 3])
    cache[w] = out
    return out


def conv_pads(kernel: list[int], pads: list[int], dilations: list[int]) -> list[int] | None:
    """The Conv pads that give a stride-1 ConvTranspose's (or conv input gradient's) output, or None where one
    would be negative."""
    rank = len(kernel)
    out = [dilations[d % rank] * (kernel[d % rank] - 1) - pads[d] for d in range(2 * rank)]
    return out if all(p >= 0 for p in out) else None


def _conv_out_shape(x: list[int], w: list[int], pads: list[int], dil: list[int]) -> list[int]:
    """A stride-1 Conv's output shape (what ORT infers) for dY ``x`` over the flipped weights of ConvTranspose
    weight ``w`` (C_in, C_out, k...)."""
    rank = len(x) - 2
    return [int(x[0]), int(w[1])] + [int(x[2 + d]) + pads[d] + pads[d + rank] - dil[d] * (int(w[2 + d]) - 1)
                                     for d in range(rank)]


def _why_not(node: ir.Node) -> str | None:
    a = node.attributes
    if a.get_int("group", 1) != 1:
        return "grouped (not handled)"
    if a.get_string("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return "auto_pad"
    if any(s != 1 for s in a.get_ints("strides", [1, 1])):
        return "strided (a Conv would need a dilated dY)"
    if any(p != 0 for p in a.get_ints("output_padding", [0, 0])) or a.get("output_shape") is not None:
        return "output_padding / output_shape"
    if len(node.inputs) != 2:
        return "bias input"
    x, w = _static(node.inputs[0]), _static(node.inputs[1])
    if x is None or w is None or len(x) != 4 or len(w) != 4:
        return "X or W without a static 4-D shape"
    return None


class ConvTransposeAsConvPass(OnnxcompPass):
    """Every stride-1, group-1 ``ConvTranspose`` whose col buffer exceeds ``max_scratch_bytes`` becomes a
    ``Conv`` over its flipped, transposed weights (module docstring)."""

    name = "conv_transpose_as_conv"

    def __init__(self, max_scratch_bytes: int = 0) -> None:
        self.max_scratch_bytes = max_scratch_bytes

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        taken = ir_taken_names(graph)
        cache: dict[ir.Value, ir.Value] = {}
        for node in [n for n in graph if n.op_type == "ConvTranspose" and n.domain in ("", "ai.onnx")]:
            why = _why_not(node)
            if why is None:
                x, w = _static(node.inputs[0]), _static(node.inputs[1])
                col = conv_transpose_col_bytes(x, w)
                if col <= self.max_scratch_bytes:
                    continue
                a = node.attributes
                kernel = w[2:]
                dil = list(a.get_ints("dilations", [1, 1]))
                pads = conv_pads(kernel, list(a.get_ints("pads", [0, 0, 0, 0])), dil)
                if pads is None:
                    why = "pads above dilation·(kernel-1)"
            if why is not None:
                outcome.skipped.append(Skipped(node.name, PATTERN, why))
                continue
            ed = IrGraphEditor(graph, taken, prefix=f"{node.name or node.outputs[0].name}_asconv", sep="/")
            w_t = flipped_weights(ed, node.inputs[1], w, cache)
            y = node.outputs[0]
            conv = ed.node("Conv", [node.inputs[0], w_t], [(ed.name("dx"), ir.DataType.FLOAT, _static(y))],
                           name=ed.name("Conv"), pads=pads, dilations=dil, strides=[1, 1],
                           kernel_shape=list(kernel), group=1)
            label = node.name or y.name
            # the Conv's output (declared as ORT infers it) takes the name, type and readers; a lifted
            # declaration of y is kept on a view
            conv.outputs[0].shape = ir.Shape(_conv_out_shape(x, w, pads, dil))
            ed.take_over_as_declared(y, conv.outputs[0])
            graph.insert_before(node, ed.nodes)
            graph.remove(node, safe=True)
            outcome.records.append(PassRecord(
                "scratch", self.name, label,
                {"conv_transpose": label, "col_buffer_bytes": col, "exact": False}))
        outcome.modified = bool(outcome.records)
        return outcome
