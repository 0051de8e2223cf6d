"""Pass: ReluGrad on a decoded sign mask as a product, ``Mul(dY, Cast(mask, float))`` (lossy policies).

Where the sign bits hold ReLU's input (passes/signbits.py), ReluGrad reads ``Cast(mask, float)``: 1.0 where
X > 0, else 0.0. ORT 1.19's CPU ReluGrad kernel selects per element with a branch on X > 0, so on real masks
(signs close to random) it runs at the speed of branch mispredictions: 7 ns per element, one thread
(ResNet-18 batch 32, 64×64: 15 ms for the 8 MiB stem map, twice that in the chunked stem backward's two
passes, against ~1 ms for a ``Mul`` of the same size; docs/notes/steptime.md). With X ∈ {0, 1},
``dY · X`` gives the same values: ``dY · 1 = dY`` for every dY, ``dY · 0 = ±0``. What differs:

* the *sign* of a masked zero (``dY · 0`` is −0 for negative dY; ReluGrad gives +0). A zero's sign changes
  no sum, product or parameter update that is not itself zero (the same argument as passes/masked_fill.py);
* a NaN or ±inf gradient at a masked position gives NaN where ReluGrad gives +0 (a step with a non-finite
  gradient is lost either way).

So the losses and parameters stay those of ReluGrad in practice, but the gradient tensor is not bit for bit
the same: the pass is only in the lossy policies (passes/__init__.py), never in an exact one. It runs last,
after the chunked backward regions were built (their finder looks for ReluGrad). Only ReluGrads whose X is
a ``Cast`` to float of a boolean tensor are rewritten (0/1 by construction); any other ReluGrad (a float
stash, a recomputed ReLU input) is left alone.

Then, where that boolean mask is a native bit decode (``Reshape(Gather(bool LUT [256, 8], bytes), shape)``,
passes/encode_stash.py) read only by the Cast, the Cast is folded into the decode: the Gather reads the same
table as float32 0.0 / 1.0 and its output is the float mask itself. Same values as ``Cast(bool → float)``
(exactly 0.0 / 1.0), so the products are the same bits; one full-size node and the bool buffer fewer (a fresh
mapping each under ``measure``'s pinned allocator). ResNet-18 shape [32, 64, 32, 32], one thread, decode +
Mul: 16.9 → 14.6 ms CPU pinned, 5.2 → 4.0 ms glibc (docs/steptime/run3/maskdec.py). The gathering nodes move to
the Cast's place, so the float buffer is born where the Cast's output was. A mask that anything else reads
(a chunked region's Slices, which slice the one-byte mask per chunk) keeps its bool decode and Cast.
Opt-in (``MaskGradPass(fold_decode=True)``): see the constructor.
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped
from .editor import IrGraphEditor
from .encode_stash import BITS_LUT_FLOAT, NATIVE_BITS_LUT, NATIVE_BITS_LUT_FLOAT, is_native_bits_decode, \
    is_native_float_mask_decode
from .records import PassRecord

PATTERN = "ReluGrad(dY, Cast(bool mask))"
_MS = "com.microsoft"


def _mask_input(node: ir.Node) -> ir.Value | str:
    """The 0/1 float mask ReluGrad ``node`` reads, or why it reads something else."""
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return "not a two-input ReluGrad"
    x = node.inputs[1]
    cast = x.producer()
    if cast is not None and is_native_float_mask_decode(cast):
        return x                 # a folded decode (below): the float table holds only 0.0 and 1.0
    if cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx"):
        return "X is not a Cast (a float stash or a recomputed input: its values are not 0/1)"
    source = cast.inputs[0]
    to = cast.attributes.get("to")
    if source is None or source.dtype != ir.DataType.BOOL or to is None or to.as_int() != ir.DataType.FLOAT:
        return "X is not a boolean cast to float32"
    if node.outputs[0].dtype not in (None, ir.DataType.FLOAT) or node.inputs[0].dtype not in (None, ir.DataType.FLOAT):
        return "not float32"
    return x


FOLD_PATTERN = "Cast(native bit decode, float) -> decode from the float table"


def _fold_cast_into_decode(graph: ir.Graph, cast: ir.Node, editor: IrGraphEditor) -> dict[str, str] | str:
    """``Cast(Reshape(Gather(bool LUT, idx)), float)`` → ``Reshape(Gather(float LUT, idx))`` (module docstring),
    or why not. Same values; the Cast goes, its readers read the decode."""
    mask = cast.inputs[0]
    decode = mask.producer() if mask is not None else None
    if decode is None or not is_native_bits_decode(decode):
        return "the mask is not a native bit decode"
    if len(mask.uses()) != 1:
        return "the bool mask has other readers (e.g. a chunked region's Slices): kept one byte per element"
    gather = decode.inputs[0].producer()
    if len(gather.outputs[0].uses()) != 1 or len(gather.inputs) != 2:
        return "the gathered rows have other readers"
    outputs = set(graph.outputs)
    if mask in outputs or gather.outputs[0] in outputs or cast.outputs[0] in outputs:
        return "a graph output"
    lut = gather.inputs[0]
    gather.replace_input_with(0, editor.shared_tensor(NATIVE_BITS_LUT_FLOAT, BITS_LUT_FLOAT))
    gather.outputs[0].dtype = ir.DataType.FLOAT
    decode.outputs[0].dtype = ir.DataType.FLOAT
    # Born where the Cast's output was: the float mask is 4 bytes per element against the bool's 1, and the
    # index (int32, 1/2 byte per element) is what waits instead.
    graph.remove([gather, decode])
    graph.insert_before(cast, [gather, decode])
    ir.convenience.replace_all_uses_with(cast.outputs[0], decode.outputs[0])
    graph.remove(cast, safe=True)
    if lut.name == NATIVE_BITS_LUT and not lut.uses():
        graph.initializers.pop(lut.name, None)
    return {"cast": cast.name, "decoder": decode.name, "mask": decode.outputs[0].name}


class MaskGradPass(OnnxcompPass):
    """Every ``ReluGrad(dY, Cast(bool, float))`` becomes ``Mul(dY, Cast(bool, float))`` (see the module
    docstring: same values, a masked zero's sign may differ; lossy policies only); then each such Cast of a
    native bit decode read by nothing else folds into the decode (``fold_decode``, opt-in: same values, exact)."""

    name = "mask_grad"
    full_check = False

    def __init__(self, fold_decode: bool = False) -> None:
        # Off by default (no policy turns it on): bit-identical and 3.5 MiB fewer fresh bytes a step on ResNet-18
        # dpr-fp16, but ORT-defaults growth measured +0.3 MiB there (2 runs each, `docs/notes/steptime3.md`) and the
        # whole-step time gain was within the noise; the lead's call.
        self.fold_decode = bool(fold_decode)

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        casts: list[ir.Node] = []
        for node in list(model.graph):
            if node.op_type != "ReluGrad" or node.domain != _MS:
                continue
            found = _mask_input(node)
            if isinstance(found, str):
                outcome.skipped.append(Skipped(node.name or node.outputs[0].name, PATTERN, found))
                continue
            # The node keeps its place, inputs and output value (and so every reader and the planner's
            # view of its buffers); only the kernel changes.
            node.op_type, node.domain = "Mul", ""
            if found.producer() is not None and found.producer().op_type == "Cast" \
                    and found.producer() not in casts:
                casts.append(found.producer())
            outcome.records.append(PassRecord("moved", self.name, node.name or node.outputs[0].name, {
                "node": node.name, "op": "ReluGrad", "as": "Mul(dY, mask)", "pass": self.name,
                "pattern": PATTERN, "mask": found.name, "exact": False,
                "note": "same values; a masked zero's sign may differ (and a non-finite dY there gives NaN): "
                        "ORT's ReluGrad branches per element"}))
            outcome.modified = True
        if not self.fold_decode:
            return outcome
        editor = IrGraphEditor(model.graph, prefix="") if casts else None
        for cast in casts:
            cast_out = cast.outputs[0].name
            folded = _fold_cast_into_decode(model.graph, cast, editor)
            if isinstance(folded, str):
                outcome.skipped.append(Skipped(cast.name or cast_out, FOLD_PATTERN, folded))
                continue
            for r in outcome.records:       # the Muls' records name the mask they now read
                if r.detail.get("mask") == cast_out:
                    r.detail["mask"] = folded["mask"]
            outcome.records.append(PassRecord("moved", self.name, folded["mask"], {
                **folded, "as": "Gather(float LUT)", "pass": self.name, "pattern": FOLD_PATTERN, "exact": True,
                "note": "the Cast's values (0.0 / 1.0) straight from the decode's table: no bool buffer, no Cast"}))
            outcome.modified = True
        return outcome
