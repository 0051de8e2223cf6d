"""Pass: keep ORT's buffer-reuse plan from holding forward transients across the step's peak.

With memory reuse on (ORT's default), a new tensor takes the most recently freed buffer of the *same element
size and shape* (planner/ort_reuse.py). A forward transient's buffer therefore waits, dead, for the next
tensor of its shape, however late that is born: in a rewritten graph, recompute clones and gradients in the
backward have exactly the shapes of the forward's MLP and qkv transients, so one buffer per such shape is held
from the forward to the backward, across the peak (GPT-tiny ``lossless``, b16 T256: 64 MiB of the 97.8 MiB
the replay predicts, 60.3 MiB without reuse; ORT's memory-pattern block measured 97.75 MiB).

The lever is the shape ORT matches on. This pass replays ORT's plan in its DEFAULT order, and while the
replayed peak holds a buffer whose tensors are all dead, gives the tensors of that buffer's shape on one side
of the peak (born up to it, else born after it) leading axes of size 1 — a shape no other tensor has, the same
values in the same memory order: elementwise ops (Add, Mul, Gelu, Dropout, ...) read ``Unsqueeze`` views of
their full-rank inputs, a MatMul (2-D weight, or batched) reads views of its inputs, Softmax/LayerNormalization/
Concat/Split get their axis shifted, and every reader of an output reads a ``Reshape`` view back to the old
shape. Channel ops (BatchNorm in training, its gradient) and forward convolutions (Conv, opt-in: see CONV_OPS)
take *trailing* axes of 1 instead; ConvGrad's dX and MaxPoolGrad's dX only get a *declared* trailing axis, their
2-D kernels unchanged (DECLARED_OPS). Views are zero-copy in ORT (Reshape and Unsqueeze alias their input). A change is
kept only if the replayed peak drops (or stays while less is held overall); the records carry the predicted peaks.

Views must not stand where ORT fuses ops, or ORT computes differently: a MatMul followed *or preceded* by a
scalar Mul/Div becomes FusedMatMul(alpha), which scales inside the GEMM (ORT looks through Identity nodes: it
removes them first), and a Transpose feeding a MatMul is folded into it; those nodes are left alone (a view
between MatMul and Mul changed GPT-tiny ``lossless``'s 4th loss, NOTES-reuse.md; one between the attention
backward's scale Mul and its dQ product its 3rd, NOTES-gptexact.md). With that, losses stay bit-identical.

For lossy graphs a second plan competes (``plan_segments``, NOTES-vit4x.md): the run order cut into stretches,
each with shapes of its own, so ORT's freelist never hands a buffer from one stretch to the next; the plan
with the lower replayed peak is applied (the segment plan only when ``SEGMENT_MARGIN`` lower). ViT-tiny
``dpr-fp8-src16`` under ORT's defaults: 24.2 → 16.7–17.4 MiB; with chunk_mlp and 64 stretches 12.4 MiB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ..planner.buffers import Buffer
from ..planner.ort_reuse import Signature, ort_signatures, planned_live, reuse_plan
from ..custom_ops import contract
from .base import OnnxcompPass, PassOutcome
from .editor import IrGraphEditor, const_array, unique_name
from .records import PassRecord

MS = "com.microsoft"
# Ops computed element by element (broadcasting from the right): a leading axis of 1 on every full-rank input
# gives the same values with one more leading axis on every output.
ELEMENTWISE = {("", op) for op in (
    "Add", "Sub", "Mul", "Div", "Pow", "Where", "Cast", "Relu", "Erf", "Tanh", "Sigmoid", "Neg", "Sqrt", "Exp",
    "Log", "Abs", "Less", "Greater", "Equal", "And", "Or", "Not", "Dropout", "Sum")} | {
    (MS, op) for op in ("Gelu", "FastGelu", "GeluGrad", "FastGeluGrad", "DropoutGrad", "BiasGelu", "ReluGrad")}
# Ops with an axis attribute (and its default): a non-negative axis moves up with the leading axes.
AXIS_OPS = {("", "Softmax"): -1, ("", "LayerNormalization"): -1, (MS, "SoftmaxGrad_13"): -1, ("", "Concat"): None,
            ("", "Split"): 0}
# Ops over [N, C, spatial...] whose kernels flatten the spatial axes (ORT 1.19's CPU BatchNorm in training mode
# and BatchNormalizationGrad: N, C, and the product of the rest): trailing axes of 1 on the listed inputs give the
# same values, bit for bit (tests/test_reuse_signature.py), with trailing axes on the first output only (the
# per-channel outputs keep their shapes). {op: indices of the inputs that take the axes}.
TRAILING_OPS = {(MS, "BatchNormInternal"): (0,), (MS, "BatchNormalizationGrad"): (0, 1)}
# More ops of the same two kinds, met in the architecture suite's exact plans (docs/notes/suitedefaults.md): LeakyRelu
# and its gradient are element by element (leaky_vgg: a recomputed LeakyRelu in the backward took the forward one's
# buffer, 6.1 MiB held dead across the peak); ORT's training forms of Concat and Split copy along ``axis`` like
# Concat/Split (densenet_s). ConcatTraining's second output (the per-input lengths, rank 1) keeps its shape:
# see ``lifted_outputs``.
ELEMENTWISE |= {("", "LeakyRelu"), (MS, "LeakyReluGrad")}
AXIS_OPS |= {(MS, "ConcatTraining"): None, (MS, "SplitTraining"): 0}
# Outputs that keep their shape when an axis op is lifted: {op: index of the first output that stays}.
UNLIFTED_TAIL = {(MS, "ConcatTraining"): 1}
# Forward convolutions take a spatial axis of size 1 *in front of* their own (kind ``spatial``): a 2-D convolution
# of [N, C, H, W] with a [K, C/g, kh, kw] kernel is the 3-D one of [N, C, 1, H, W] with [K, C/g, 1, kh, kw]
# (kernel, stride, dilation 1 and no padding on the new axis). ORT 1.19's CPU Conv (MLAS) builds the same
# columns (Vol2Col instead of Im2Col, the same values in the same order) and runs the same GEMMs: the same bits
# (tests/test_reuse_signature.py), and about the same time, since Vol2Col's inner loop still copies rows of W
# contiguous elements. The axis at the *end* ([N, C, H, W, 1], how this lift started) gives the same bits too, but
# Vol2Col then copies one element per row: 2-3× the 2-D Conv's time on VGG-16's stage shapes (one thread,
# NOTES-vggfast.md), which is why the lift was opt-in. Not when ORT would run the 2-D one another way: as NCHWc
# (only for a constant weight; a training graph's weights are parameters), through MLAS's 2-D-only direct GEMM
# (see ``_conv_liftable``), or fused with a lone Add/Sum or rounding activation reader (the fused kernel
# accumulates or rounds its own way). A lone Relu/Clip reader is not a reason: the view between them unfuses
# them, and the untouched training graph never had them fused (ReluGrad reads the Conv output as well), so the
# lifted graph computes what the untouched one does (VGG-16 auto --exact: losses equal, NOTES-cnndefaults.md).
# ORT's ConvGrad took a trailing axis once (its N-D form: same bits without groups, wrong gradients with groups,
# ~6× slower per op, NOTES-cnndefaults.md); its dX now gets a declared axis instead (DECLARED_OPS), which keeps
# the 2-D kernel and works for grouped convolutions as well.
# {op: (indices of the inputs that take the axes, of the outputs that do)}.
CONV_OPS = {("", "Conv"): ((0, 1), (0,))}
# Backward ops whose outputs take a *declared* trailing axis of 1, the kernel left as it is (kind
# ``declared-trail``). ORT 1.19 registers no shape inference for them, so ORT plans (reuse key, memory pattern)
# with the shape the graph declares, and their CPU kernels do not read it the way a view would: ``ConvGrad``
# writes dX with X's shape whatever dX declares (``context->Output(0, X->Shape())``, the same 2-D im2col/GEMM as
# before, so the same bits and the same speed), and ``MaxPoolGrad`` makes dX with the declared shape (its batch
# axis taken from dY), zeroes it and scatters dY by MaxPool's absolute flat indices: the same bytes in the same
# order (pool_gradient_op.cc). Trailing, not leading, axes: MaxPoolGrad overwrites the declared first axis with
# dY's batch. Readers read a Reshape view back, as for every lift. This gives the backward side of a held
# forward Conv buffer (VGG-16: MaxPoolGrad and ConvGrad outputs of a stage's shape) a shape of its own while the
# fast 2-D kernels keep running; the Conv lift (CONV_OPS) is then only needed where the forward side is the one
# to move. Checked on ORT (tests/test_reuse_signature.py). {op: indices of the outputs declared}.
DECLARED_OPS = {("", "MaxPoolGrad"): (0,), (MS, "ConvGrad"): (0,)}
# Spatial axes a convolution may have once lifted: MLAS runs convolutions of up to 3 spatial axes; ORT's Conv
# takes a generic, slower im2col path beyond that, so a 2-D convolution takes one axis at most.
MAX_CONV_SPATIAL = 3
# Readers ORT's ConvActivationFusion / ConvAddActivationFusion merge into a Conv whose only reader they are, and
# whose fused arithmetic may differ from the separate kernels' (see CONV_OPS).
_CONV_FUSED_READERS = {("", op) for op in ("Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Add", "Sum")}
MIN_BYTES = 256 << 10   # buffers smaller than this are not worth a view (ViT-tiny: 0.5 MiB transients matter)
# Stretches of the run order the segment plan gives shapes of their own (ranks grow by up to this many axes).
# Measured on ViT-tiny dpr-fp8-src16 (ORT's pattern block, NOTES-vit4x.md): 8 → 19.1, 12 → 18.3 (Transposes
# kept), 24 → 14.0 MiB (Transposes lifted), 48 → 16.7 MiB (all Transposes): a tuning constant, not a law.
# With the MLP backward batch-chunked (passes/chunk_mlp.py) more, shorter stretches do better (below): 64.
SEGMENTS = 64
# The segment plan's own size floor (the greedy plan keeps ``MIN_BYTES``): batch-chunked regions (chunk_mlp,
# chunk_attention) leave many 64–128 KiB transients that pass between blocks like the large ones did. Measured
# on ViT-tiny dpr-fp8-src16 with chunk_mlp (ORT's defaults, growth MiB; NOTES-vitmlp.md): 24/256 KiB 15.7,
# 48/256 KiB 15.6, 24/128 KiB 15.0, 64/128 KiB 13.5, 48/64 KiB 13.3, 64/64 KiB 12.4–12.5, 128/64 KiB 12.2,
# 64/32 KiB 12.4. A tuning constant like SEGMENTS, not a law.
SEGMENT_MIN_BYTES = 64 << 10
# The segment plan replaces the greedy one only where its replayed peak is this much lower: the replay is a
# model (off by several percent against ORT's pattern block, NOTES-vit4x.md), and on MobileNetV2 dpr-fp8 a
# segment plan replayed 1.3 % lower (69.24 vs 70.17 MB) measured 4.3 MiB *higher* under ORT's defaults
# (176.2 vs 171.9 MiB, twice). ViT-tiny / GPT-tiny lossy: 31 % / 23 % lower (NOTES-vitmlp.md).
SEGMENT_MARGIN = 0.05
# Single-tensor candidates tried per held buffer and round (the greedy plan's last resort; see ``plan``).
MAX_SINGLES = 8


Shapes = dict[str, tuple[int, ...]]   # static shapes the analysis inferred, by value name


@dataclass
class _Replay:
    """What both plans replay on: the buffers in ORT's run order (``n`` steps), ORT's reuse key of each, the
    producing step of each buffer, the run order's node names, static shapes and element types by value."""
    n: int
    buffers: list[Buffer]
    base: dict[str, Signature | None]
    producer: dict[str, int | None]
    node_names: list[str]
    known: Shapes
    elems: dict[str, ir.DataType]


def _shape(v: ir.Value | None, known: Shapes) -> tuple[int, ...] | None:
    """``v``'s static shape: declared, else inferred by the analysis; None if unknown."""
    if v is None:
        return None
    if v.shape is not None and all(isinstance(d, int) for d in v.shape):
        return tuple(int(d) for d in v.shape)
    return known.get(v.name)


def _rank(v: ir.Value | None, known: Shapes) -> int | None:
    s = _shape(v, known)
    return None if s is None else len(s)


def _key(node: ir.Node) -> tuple[str, str]:
    return (node.domain if node.domain != "ai.onnx" else "", node.op_type)


MATMULS = {("", "MatMul"), (MS, "FusedMatMul")}
SCALES = {("", "Mul"), ("", "Div")}


def _scalar_constant(v: ir.Value | None) -> bool:
    """Is ``v`` a one-element constant (an initializer, or a Constant node's output): a scale ORT's
    MatMulScaleFusion can fold into FusedMatMul's alpha?"""
    array = const_array(v)
    return array is not None and array.size == 1


def _past_identities(v: ir.Value | None) -> ir.Node | None:
    """``v``'s producer, looking through Identity nodes (ORT eliminates them before it fuses)."""
    p = v.producer() if v is not None else None
    while p is not None and _key(p) == ("", "Identity"):
        p = p.inputs[0].producer() if p.inputs and p.inputs[0] is not None else None
    return p


def _readers_past_identities(node: ir.Node) -> list[ir.Node]:
    """The nodes that read ``node``'s outputs, looking through Identity nodes."""
    readers, todo = [], [u.node for o in node.outputs for u in o.uses()]
    while todo:
        r = todo.pop()
        if _key(r) == ("", "Identity"):
            todo += [u.node for o in r.outputs for u in o.uses()]
        else:
            readers.append(r)
    return readers


def _scales_input(scale: ir.Node) -> bool:
    """Could ORT fold ``scale`` (a Mul/Div feeding a MatMul) into the MatMul's alpha: a Mul by a scalar
    constant, or a Div by one."""
    ins = [v for v in scale.inputs if v is not None]
    return any(_scalar_constant(v) for v in (ins if _key(scale) == ("", "Mul") else ins[1:]))


def _scaled_inputs(node: ir.Node) -> set[int]:
    """Indices of a MatMul's inputs that a scalar Mul/Div makes (past Identity nodes): ORT folds those scales
    into the product's alpha, so no view may stand between (see ``_fuses_with_matmul``)."""
    return {i for i, v in enumerate(node.inputs) if v is not None and (p := _past_identities(v)) is not None
            and _key(p) in SCALES and _scales_input(p)}


def _fuses_with_matmul(node: ir.Node) -> bool:
    """Would views around ``node`` break ORT's MatMulScaleFusion, which folds scalar Mul/Div behind *and in
    front of* a MatMul into FusedMatMul(alpha)? The fused GEMM scales inside; a view between them makes ORT
    run MatMul and Mul apart, which rounds differently (GPT-tiny ``lossless``: a view between MatMul and Mul
    moved the 4th measured loss from 3.4111740589 to 3.4111738205; a view on the attention backward's
    FusedMatMul input dQ = (dS·scale)·K, the scale Mul in front of it behind an Identity, gave exactly the same
    moved loss, NOTES-gptexact.md). ORT eliminates Identity nodes first, so they are looked through. A MatMul
    whose *input* is scaled is not refused here: ``liftable`` lifts its other input alone (see there)."""
    key = _key(node)
    producers = [_past_identities(v) for v in node.inputs if v is not None]
    readers = _readers_past_identities(node)
    if key in MATMULS:
        return any(_key(c) in SCALES for c in readers)
    if key in SCALES:
        return any(p is not None and _key(p) in MATMULS for p in producers) or \
            (_scales_input(node) and any(_key(c) in MATMULS for c in readers))
    return False


def lift_kind(node: ir.Node) -> str:
    """How ``node``'s outputs take the axes of 1: ``lead`` (leading axes; inputs through views), ``trail``
    (trailing axes on a channel op's data tensors), ``spatial`` (a convolution: new spatial axes in front of the
    old ones, right after the channel axis; see CONV_OPS), ``declared`` (a codec decoder: only its
    output's declared shape changes, leading axes; see ``_lift``), ``declared-trail`` (DECLARED_OPS: only the
    declared shape of the listed outputs changes, trailing axes)."""
    key = _key(node)
    if key in DECLARED_OPS:
        return "declared-trail"
    if key in CONV_OPS:
        return "spatial"
    if key in TRAILING_OPS:
        return "trail"
    if contract.is_decoder(node.domain, node.op_type):
        return "declared"
    return "lead"


def lifted_outputs(node: ir.Node) -> list[int]:
    """Indices of the outputs that take the axes (the data output of a channel op or decoder, else all)."""
    if lift_kind(node) == "declared":
        return [contract.DECODER_OUTPUT]
    if lift_kind(node) == "declared-trail":
        return [i for i in DECLARED_OPS[_key(node)] if i < len(node.outputs) and node.outputs[i].name]
    if _key(node) in CONV_OPS:
        return [i for i in CONV_OPS[_key(node)][1] if i < len(node.outputs) and node.outputs[i].name]
    if lift_kind(node) == "trail":
        return [0]
    stop = UNLIFTED_TAIL.get(_key(node), len(node.outputs))
    return [i for i, o in enumerate(node.outputs) if o.name and i < stop]


def max_axes(node: ir.Node, known: Shapes | None = None) -> int | None:
    """The most axes of 1 ``node`` may take (a convolution: up to MAX_CONV_SPATIAL spatial axes in all); None:
    no limit."""
    if _key(node) not in CONV_OPS:
        return None
    r = _rank(node.inputs[0], known or {})
    return None if r is None else max(MAX_CONV_SPATIAL - (r - 2), 0)


def _within_max_axes(nodes: list[ir.Node], k: int, known: Shapes) -> bool:
    """Whether every node of ``nodes`` may take ``k`` axes of 1 (see ``max_axes``)."""
    return all(max_axes(nd, known) is None or k <= max_axes(nd, known) for nd in nodes)


def _conv_liftable(node: ir.Node, graph_outputs: set[ir.Value], known: Shapes) -> bool:
    """A Conv that can take a spatial axis of 1 (see CONV_OPS): static shapes on the lifted inputs and outputs, a
    2-D convolution, explicit padding (NOTSET or VALID), a weight that is not a constant initializer (a training
    graph's parameters are graph inputs), no MLAS algorithm kept for 2-D ones, no ORT fusion with a lone reader."""
    ins, outs = CONV_OPS[_key(node)]
    values = [node.inputs[i] if i < len(node.inputs) else None for i in ins]
    lifted = [node.outputs[i] for i in lifted_outputs(node)]
    if any(v is None or _shape(v, known) is None for v in values) or not lifted or \
            any(o in graph_outputs or _shape(o, known) is None for o in lifted):
        return False
    if 0 not in lifted_outputs(node) or _rank(node.inputs[0], known) != 4:
        return False   # 2-D convolutions only: the forms checked bit for bit (1-D/3-D ones were not)
    pad = node.attributes["auto_pad"].value if "auto_pad" in node.attributes else "NOTSET"
    if (pad.decode() if isinstance(pad, bytes) else pad) not in ("NOTSET", "VALID"):
        return False
    weight = node.inputs[1]
    if weight.is_initializer() and not weight.is_graph_input():
        return False   # a constant weight: ORT runs the 2-D convolution as NCHWc, the lifted one would not be
    if _mlas_2d_only(node, _shape(node.inputs[0], known), _shape(weight, known)):
        return False
    uses = list(node.outputs[0].uses())
    return not (len(uses) == 1 and _key(uses[0].node) in _CONV_FUSED_READERS)


def _mlas_2d_only(node: ir.Node, x: tuple[int, ...], w: tuple[int, ...]) -> bool:
    """Might MLAS (ORT's CPU Conv) run this 2-D convolution with an algorithm it keeps for 2-D ones, so that
    the 3-D form would sum in another order? ``MlasConvPrepare``: a direct GEMM when each group has one input
    channel, no stride, padding or dilation and the kernel spans the input's width (or its height, one
    column wide); newer MLAS builds add 2-D depthwise kernels (7×7 stride-2 channel-multiplier-2 ones on x86-64,
    3×3 ones on ARM64/WASM). Any one-input-channel-per-group convolution matching those is left 2-D."""
    import platform

    attr = {a.name: a.value for a in node.attributes.values()}
    kh, kw = w[2], w[3]
    if w[1] != 1:
        return False
    strides = list(attr.get("strides", [1, 1]))
    pads = list(attr.get("pads", [0, 0, 0, 0]))
    dilations = list(attr.get("dilations", [1, 1]))
    plain = strides == [1, 1] and not any(pads) and dilations == [1, 1]
    if plain and (kw == x[3] or (kh == x[2] and kw == 1)):
        return True
    if attr.get("group", 1) > 1 and (kh, kw) == (7, 7) and w[0] // attr.get("group", 1) == 2:
        return True
    arm = platform.machine().lower() in ("arm64", "aarch64") or platform.machine().lower().startswith("wasm")
    return arm and (kh, kw) == (3, 3) and w[0] // attr.get("group", 1) == 1 and dilations == [1, 1]


def _widen_conv_attributes(node: ir.Node, k: int) -> None:
    """Kernel, strides, dilations and pads of a convolution lifted by ``k`` spatial axes of 1 in front of its
    own (kernel, stride and dilation 1 and no padding on them; see CONV_OPS)."""
    for name in ("kernel_shape", "strides", "dilations"):
        if name in node.attributes:
            node.attributes[name] = ir.AttrInt64s(name, [1] * k + list(node.attributes[name].value))
    if "pads" in node.attributes:
        pads = list(node.attributes["pads"].value)
        half = len(pads) // 2
        node.attributes["pads"] = ir.AttrInt64s("pads", [0] * k + pads[:half] + [0] * k + pads[half:])


GEMMS = {("", "MatMul"), (MS, "FusedMatMul"), ("", "Gemm")}


def liftable(node: ir.Node, graph_outputs: set[ir.Value], known: Shapes | None = None,
             keep_fusions: bool = True, transposes: bool = False, convs: bool = True) -> bool:
    """True when ``node``'s outputs can take axes of 1 with the same values (see module), and views
    around it break no ORT fusion (``keep_fusions``; without it, for lossy graphs, a MatMul → scalar Mul/Div
    pair may be split: the last bits of the product change). A Transpose read by a MatMul/FusedMatMul/Gemm is
    never lifted: ORT folds it into the product, and behind a view it copies it instead (ViT-tiny ``dpr-fp8``
    under onnxcomp's settings: 9 → 14 MiB). Other Transposes (``transposes``: the segment plan) are plain
    copies whatever the shape: lifting one shifts its ``perm`` and changes no value. Channel ops (BatchNorm in
    training, its gradient) take trailing axes on their data tensors; a codec decoder's output only changes
    its declared shape (the PyOp writes the same bytes, ORT's memory pattern places a block by its size, and
    its readers read a Reshape view to the shape it had). Convolutions only with ``convs`` (see CONV_OPS)."""
    known = known or {}
    kind = lift_kind(node)
    if _key(node) in CONV_OPS:
        return convs and _conv_liftable(node, graph_outputs, known)
    if kind != "lead":
        outs = [node.outputs[i] for i in lifted_outputs(node) if i < len(node.outputs)]
        if len(outs) != 1 or not outs[0].name or outs[0] in graph_outputs or _shape(outs[0], known) is None:
            return False
        if kind in ("declared", "declared-trail"):
            return True
        r = len(_shape(outs[0], known))
        idx = TRAILING_OPS[_key(node)]
        return r >= 3 and all(i < len(node.inputs) and node.inputs[i] is not None and
                              _shape(node.inputs[i], known) == _shape(outs[0], known) for i in idx)
    outs = [node.outputs[i] for i in lifted_outputs(node)]
    if not outs or any(o in graph_outputs or _shape(o, known) is None for o in outs) or \
            (keep_fusions and _fuses_with_matmul(node)):
        return False
    key, r = _key(node), _rank(outs[0], known)
    if key == ("", "Transpose"):
        return transposes and not any(_key(u.node) in GEMMS for o in outs for u in o.uses()) and \
            all(v is not None and _rank(v, known) == r for v in node.inputs)
    if key in ELEMENTWISE or key in AXIS_OPS:   # not Transpose: ORT folds it into FusedMatMul's transA/B
        return all(_rank(o, known) == r for o in outs) and \
            all(v is None or (_rank(v, known) is not None and _rank(v, known) <= r) for v in node.inputs)
    if key in (("", "MatMul"), (MS, "FusedMatMul")):
        # Y = A·B with a 2-D B (one GEMM over A's rows), or both of Y's rank (one GEMM per batch index):
        # leading axes of 1 on A (and B) change neither.
        ra, rb = _rank(node.inputs[0], known), _rank(node.inputs[1], known)
        if (ra or 0) < 2 or not (rb == 2 or ra == rb == r):
            return False
        attrs = {k: v.value for k, v in node.attributes.items()}
        if any(attrs.get(k, 0) for k in ("transA", "transBatchA", "transBatchB")):
            return False
        # An input a scalar Mul/Div makes keeps no view (ORT folds the scale into the product's alpha): a
        # batched product lifts its other input alone, and ORT's MatMul broadcasts the unlifted one over the
        # leading axes of 1, the same GEMM per batch index, bit for bit (tests/test_reuse_signature.py).
        idx = _lifted_inputs(node, known, keep_fusions)
        if keep_fusions and set(idx) & _scaled_inputs(node):
            return False
        # The segment plan (``transposes``) also keeps ORT's Transpose → MatMul folding: a view between them
        # makes ORT copy the Transpose and run a plain GEMM, which sums in another order (last bits).
        lifted = [node.inputs[i] for i in idx]
        return not (transposes and any(v.producer() is not None and _key(v.producer()) == ("", "Transpose")
                                       for v in lifted))
    return False


def _lifted_inputs(node: ir.Node, known: Shapes, keep_fusions: bool = True) -> list[int]:
    """Indices of the inputs that get the axes: a MatMul's left input (and its right one when batched; with
    ``keep_fusions``, of a batched product only those no scalar Mul/Div makes, if one is left), a channel op's
    data inputs, none of a decoder's, else the full-rank ones (lower-rank inputs broadcast from the right as
    before)."""
    kind = lift_kind(node)
    if kind in ("declared", "declared-trail"):
        return []
    if _key(node) in CONV_OPS:
        return list(CONV_OPS[_key(node)][0])
    if kind == "trail":
        return list(TRAILING_OPS[_key(node)])
    r = _rank(node.outputs[0], known)
    if _key(node) in (("", "MatMul"), (MS, "FusedMatMul")):
        if _rank(node.inputs[1], known) != r:
            return [0]
        unscaled = [i for i in (0, 1) if i not in _scaled_inputs(node)] if keep_fusions else [0, 1]
        return unscaled or [0, 1]
    return [i for i, v in enumerate(node.inputs) if v is not None and _rank(v, known) == r]


def lifted_shape(shape: tuple[int, ...] | list[int], k: int, kind: str) -> list[int]:
    """``shape`` with ``k`` axes of 1: trailing for a channel op and a ``declared-trail`` op, after the first two
    (batch, channels) for a convolution (``spatial``), else leading."""
    if kind in ("trail", "declared-trail"):
        return list(shape) + [1] * k
    if kind == "spatial":
        return list(shape[:2]) + [1] * k + list(shape[2:])
    return [1] * k + list(shape)


def _new_axes(rank: int, k: int, kind: str) -> list[int]:
    """Where ``lifted_shape`` puts the ``k`` axes of 1 of a rank-``rank`` tensor (Unsqueeze's ``axes``)."""
    if kind in ("trail", "declared-trail"):
        return list(range(rank, rank + k))
    if kind == "spatial":
        return list(range(2, 2 + k))
    return list(range(k))


def _lift(node: ir.Node, k: int, editor: IrGraphEditor, graph: ir.Graph,
          views: dict[tuple[ir.Value, int, str], ir.Value], known: Shapes | None = None,
          elems: dict[str, ir.DataType] | None = None, keep_fusions: bool = True) -> None:
    """Give ``node``'s lifted outputs ``k`` axes of 1 (inputs through Unsqueeze views, readers through
    Reshape views back)."""
    known, elems = known or {}, elems or {}
    kind = lift_kind(node)

    def elem(v: ir.Value) -> ir.DataType:
        return v.dtype if v.dtype is not None else elems[v.name]

    key = _key(node)
    idx = _lifted_inputs(node, known, keep_fusions)
    for i in idx:
        v = node.inputs[i]
        view_key = (v, k, kind)
        if view_key not in views:
            shape = list(_shape(v, known))
            where = _new_axes(len(shape), k, kind)
            axes = editor.shared_const(f"onnxcomp_axes_{'_'.join(map(str, where))}" if kind != "lead"
                                       else f"onnxcomp_axes_lead{k}", where)
            start = len(editor.nodes)
            views[view_key] = editor.op("Unsqueeze", [v, axes], f"{v.name}_lift", elem(v),
                                        lifted_shape(shape, k, kind),
                                        out=f"{v.name}__lift{k}" + {"trail": "t", "spatial": "s"}.get(kind, ""))
            # Right behind the viewed tensor's producer (or first, for a graph input or initializer), not in
            # front of the reader: ORT's DEFAULT order walks a node's inputs by their producers' list
            # positions, so a view placed by its reader would reorder the walk the reuse plan was replayed on.
            made = editor.nodes[start:]
            if v.producer() is not None:
                graph.insert_after(v.producer(), made)
            else:
                graph.insert_before(next(iter(graph)), made)
        node.replace_input_with(i, views[view_key])
    if key in AXIS_OPS:
        axis = node.attributes["axis"].value if "axis" in node.attributes else AXIS_OPS[key]
        if axis is not None and axis >= 0:
            node.attributes["axis"] = ir.AttrInt64("axis", axis + k)
    elif key in CONV_OPS:
        _widen_conv_attributes(node, k)
    elif key == ("", "Transpose"):
        perm = list(node.attributes["perm"].value) if "perm" in node.attributes else \
            list(reversed(range(_rank(node.inputs[0], known))))
        node.attributes["perm"] = ir.AttrInt64s("perm", list(range(k)) + [p + k for p in perm])
    after: list[ir.Node] = []
    for i in lifted_outputs(node):
        out = node.outputs[i]
        if not out.name:
            continue
        shape = list(_shape(out, known))
        uses = list(out.uses())
        original, dtype = out.name, elem(out)
        out.name = unique_name(f"{original}__lifted", editor.taken)
        out.type = ir.TensorType(dtype)
        out.shape = ir.Shape(lifted_shape(shape, k, kind))
        dims = editor.shared_const(f"onnxcomp_shape_{'x'.join(map(str, shape)) or 'scalar'}", shape, [len(shape)])
        start = len(editor.nodes)
        editor.taken.discard(original)
        view = editor.node("Reshape", [out, dims], [(original, dtype, shape)],
                           name=unique_name(f"{original}__unlift", editor.taken)).outputs[0]
        after += editor.nodes[start:]
        for use in uses:
            use.node.replace_input_with(use.idx, view)
    graph.insert_after(node, after)


class ReuseSignaturePass(OnnxcompPass):
    """Steers ORT's buffer-reuse plan away from the peak by shape (see the module docstring)."""

    name = "reuse_signature"
    full_check = False   # adds zero-copy views and shifts axes: wiring and shapes are checked by the replay
    max_rounds = 40

    def __init__(self, order: str = "default", min_bytes: int = MIN_BYTES, keep_fusions: bool = True,
                 segments: int = SEGMENTS, segment_min_bytes: int = SEGMENT_MIN_BYTES,
                 lift_convs: bool = True) -> None:
        super().__init__()
        self.order = order
        self.min_bytes = min_bytes
        # Lossy graphs only (keep_fusions False): the segment plan (see ``plan_segments``) with this many
        # stretches of the run order, taken where its replayed peak is lower than the greedy plan's; 0: never.
        self.segments = segments
        # The segment plan's floor: the lower of the two (a caller's min_bytes=0 considers every buffer).
        self.segment_min_bytes = min(segment_min_bytes, min_bytes)
        # False only for graphs that are lossy anyway: views may then break ORT's MatMul fusions (last-bit
        # differences in a product; NOTES-reuse.md measured GPT-tiny dpr-fp8 114.3 vs 120.7 MiB that way).
        self.keep_fusions = keep_fusions
        # Forward convolutions (CONV_OPS) may be lifted. With the new axis at the end (the first form) ORT 1.19
        # ran them 2-3× slower (and ConvGrad 6×), so the lift was opt-in; with it in front of the spatial axes
        # the kernel time is the 2-D one's (VGG-16 stage shapes, one thread; whole VGG-16 step 1.00-1.01× the
        # unlifted plan's CPU time, NOTES-vggfast.md), so it is on unless asked off.
        self.lift_convs = lift_convs

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        ctx = self._replay_context(model)
        chosen, before, after, known, elems = self.plan(model, ctx)
        mode = "greedy"
        if not self.keep_fusions and self.segments > 0:
            seg = self.plan_segments(model, ctx)
            if seg[0] and seg[2] < (1 - SEGMENT_MARGIN) * (after if chosen else before):
                chosen, before, after, known, elems = seg
                mode = "segments"
        if not chosen:
            return outcome
        graph = model.graph
        editor = IrGraphEditor(graph)
        views: dict[tuple[ir.Value, int, str], ir.Value] = {}
        by_name = {n.name: n for n in graph if n.name}
        for name, k in chosen:
            _lift(by_name[name], k, editor, graph, views, known, elems, self.keep_fusions)
            outcome.records.append(PassRecord("moved", self.name, name, {
                "node": name, "op": by_name[name].op_type, "pass": self.name, "leading_axes": k,
                "reshaped": "leading axes of 1: ORT's buffer reuse no longer matches it to other tensors",
                "predicted_reuse_peak_bytes": [int(before), int(after)], "plan": mode}))
        outcome.modified = True
        return outcome

    def _replay_context(self, model: ir.Model) -> _Replay:
        """One analysis of ``model`` in ORT's run order, shared by both plans."""
        from ..analysis import analyze_model
        from ..analysis.execution_order import in_run_order

        proto = in_run_order(ir.serde.serialize_model(model), self.order)
        analysis = analyze_model(proto)
        buffers = list(analysis.buffers())
        return _Replay(
            n=len(proto.graph.node), buffers=buffers, base=ort_signatures(analysis),
            producer={b.name: analysis.tensors[b.name].producer for b in buffers},
            node_names=[nd.name for nd in proto.graph.node],
            known={name: tuple(t.type.shape) for name, t in analysis.tensors.items()
                   if t.type.shape is not None and t.size_hint is None},
            elems={name: ir.DataType.from_numpy(t.type.dtype) for name, t in analysis.tensors.items()})

    def plan(self, model: ir.Model, ctx: _Replay | None = None) -> tuple[list[tuple[str, int]], int, int, Shapes,
                                                                         dict[str, ir.DataType]]:
        """The nodes to lift (name, leading axes), the replayed reuse peak before and after, and the static
        shapes the analysis inferred (what the lift needs where the graph declares none)."""
        ctx = ctx or self._replay_context(model)
        n, buffers, base, producer = ctx.n, ctx.buffers, ctx.base, ctx.producer
        node_names, known, elems = ctx.node_names, ctx.known, ctx.elems
        graph_outputs = set(model.graph.outputs)
        ir_nodes = {nd.name: nd for nd in model.graph if nd.name}
        ok = {}

        def can_lift(i: int | None) -> bool:
            if i is None or i < 0:
                return False
            name = node_names[i]
            if name not in ok:
                nd = ir_nodes.get(name)
                ok[name] = nd is not None and liftable(nd, graph_outputs, known, self.keep_fusions,
                                                       convs=self.lift_convs)
            return ok[name]

        level: dict[int, int] = {}    # producer node (run-order index) → leading axes added
        fresh: dict[Signature, int] = {}   # per original signature: leading axes the last group got

        def lifted_names(i: int) -> tuple[str, set[str]]:
            """(lift kind, names of the outputs that take the axes) of the node at run-order index ``i``."""
            nd = ir_nodes[node_names[i]]
            return lift_kind(nd), {nd.outputs[j].name for j in lifted_outputs(nd)}

        def signatures() -> dict[str, Signature | None]:
            sig = dict(base)
            for b in buffers:
                k = level.get(producer[b.name], 0)
                if k and sig.get(b.name) is not None:
                    kind, names = lifted_names(producer[b.name])
                    if b.name in names:
                        item, shape = sig[b.name]
                        sig[b.name] = (item, tuple(lifted_shape(shape, k, kind)))
            return sig

        def peak(sig: dict[str, Signature | None]) -> tuple[tuple[int, int], int, list]:
            """(peak, bytes × steps held), the peak's step, the plan: a change must lower the peak, or keep
            it and hold less overall (a repeated structure, e.g. one buffer per shape held from block to
            block, moves the peak to the next block before it comes down)."""
            plan = reuse_plan(buffers, n, sig)
            live = planned_live(plan, n)
            at = int(np.argmax(live))
            return (int(live[at]), int(live.sum())), at, plan

        sig = signatures()
        best, at, plan = peak(sig)
        first = best
        for _ in range(self.max_rounds):
            tried: set[Signature] = set()
            held = sorted((p for p in plan if p.dead_at(at) and p.size >= self.min_bytes and p.key not in tried),
                          key=lambda p: -p.size)
            accepted = False
            for p in held:
                tried.add(p.key)
                # Either side of the peak: the tensors of this shape born up to it (the buffer then has a
                # shape nothing after the peak asks for), else those born after it (they no longer ask for it).
                same = [b for b in buffers if sig.get(b.name) == p.key]

                def side(pool: list, before: bool, partial: bool) -> set[int]:
                    """Producers of ``pool``'s tensors born up to the peak (``before``) or after it; with
                    ``partial``, only those a view can reshape (None if that leaves none)."""
                    group = {producer[b.name] for b in pool if (b.start <= at) == before}
                    if partial:
                        group = {i for i in group if can_lift(i) and not level.get(i)}
                    return group

                # Whole sides first (as before); then the liftable part of a side: where a side also holds
                # tensors no view can reshape (a Conv output, a MaxPoolGrad), moving the rest off the shape
                # still leaves one buffer fewer for the two sides to share (VGG-16: the ReLU outputs of a
                # stage, which shared a second buffer with the stage's Conv outputs); then one tensor at a time.
                # One at a time: the tensors born nearest the peak first, at most MAX_SINGLES (each is a replay
                # of the whole step; a batch-chunked graph has hundreds per shape: ResNet-18's lossy plan took
                # minutes here).
                singles = [{producer[b.name]} for b in sorted(p.values, key=lambda b: abs(b.start - at))
                           if producer.get(b.name) is not None and producer[b.name] >= 0 and
                           not level.get(producer[b.name])][:MAX_SINGLES]
                candidates = [side(same, True, False), side(same, False, False)]
                for pool in (p.values, same):
                    candidates += [side(pool, True, True), side(pool, False, True)]
                seen: list[set[int]] = []
                for group in (*candidates, *singles):
                    if not group or group in seen or not all(can_lift(i) for i in group):
                        continue
                    seen.append(group)
                    origin = base[next(b.name for b in same)]
                    k = fresh.get(origin, 0) + 1       # a shape no other tensor has
                    if not _within_max_axes([ir_nodes[node_names[i]] for i in group], k, known):
                        continue
                    old = {i: level.get(i, 0) for i in group}
                    level.update({i: k for i in group})
                    trial = signatures()
                    value, t_at, t_plan = peak(trial)
                    if value < best:
                        best, at, plan, sig = value, t_at, t_plan, trial
                        fresh[origin] = k
                        accepted = True
                        break
                    level.update(old)
                if accepted:
                    break
            if not accepted:
                break
        position = {nd.name: i for i, nd in enumerate(model.graph)}
        chosen = sorted(((node_names[i], k) for i, k in level.items() if k), key=lambda c: position[c[0]])
        return chosen, first[0], best[0], known, elems

    def plan_segments(self, model: ir.Model, ctx: _Replay | None = None) -> tuple[list[tuple[str, int]], int, int,
                                                                                  Shapes, dict[str, ir.DataType]]:
        """Segment plan: cut ORT's run order into ``segments`` equal stretches and give every liftable node
        (a buffer of ``segment_min_bytes`` or more, with a static shape) made in stretch s the leading axes s + 1.

        ORT's freelist hands a tensor the most recently freed buffer of its shape, however long ago that was
        freed; a shape shared by tensors all over the step therefore keeps its buffers from its first tensor's
        birth to its last one's death, dead in between (ViT-tiny: every block's [16, 64, 128] transients in one
        pool, the next block's attention backward waiting on buffers freed in the previous one's). With a shape
        per stretch, a buffer can only pass between tensors of one stretch: what stays held is what a stretch
        needs at once, for the stretch's length. Same values (views; fusions as the lossy greedy plan). Returns
        what ``plan`` returns."""
        ctx = ctx or self._replay_context(model)
        n, buffers, base, node_names, known = ctx.n, ctx.buffers, ctx.base, ctx.node_names, ctx.known
        graph_outputs = set(model.graph.outputs)
        ir_nodes = {nd.name: nd for nd in model.graph if nd.name}
        level: dict[int, int] = {}
        for b in buffers:
            i = ctx.producer[b.name]
            if i in level or b.size < self.segment_min_bytes or base.get(b.name) is None:
                continue
            nd = ir_nodes.get(node_names[i])
            k = 1 + (i * self.segments) // n
            if nd is not None and liftable(nd, graph_outputs, known, self.keep_fusions, transposes=True,
                                              convs=self.lift_convs) and \
                    _within_max_axes([nd], k, known):
                level[i] = k
        sig = dict(base)
        for b in buffers:
            i = ctx.producer[b.name]
            k = level.get(i, 0)
            if k and sig.get(b.name) is not None:
                nd = ir_nodes[node_names[i]]
                if b.name in {nd.outputs[j].name for j in lifted_outputs(nd)}:
                    item, shape = sig[b.name]
                    sig[b.name] = (item, tuple(lifted_shape(shape, k, lift_kind(nd))))
        before = int(planned_live(reuse_plan(buffers, n, base), n).max())
        after = int(planned_live(reuse_plan(buffers, n, sig), n).max())
        position = {nd.name: i for i, nd in enumerate(model.graph)}
        chosen = sorted(((node_names[i], k) for i, k in level.items()), key=lambda c: position[c[0]])
        return chosen, before, after, known, ctx.elems
