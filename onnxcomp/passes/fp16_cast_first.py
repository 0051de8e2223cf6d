"""Pass: a native fp16 encoder as ``Cast`` to float16 then ``Clip`` in float16, instead of ``Clip`` then ``Cast``.

Why: the native fp16 encoder (passes/encode_stash.py ``_encode_native_fp16``) clamps the float32 stash to ±65504
and casts the result: ``Clip(x) → c (float32) → Cast → payload (float16)``. While it runs, ORT holds the clamped
float32 copy ``c`` beside ``x`` (which its forward readers still need, so the Clip cannot work in place): a third
full-size tensor. On lossy squeezenet_s that copy of fire 3's 0.95 MiB Concat output set ORT's memory-pattern
block P (docs/notes/lossyfloor.md, docs/notes/lossyp.md). Cast first: ``Cast(x) → h (float16)``, then
``Clip(h, -65504, 65504) → payload``, which ORT computes in place over ``h`` (Clip is MayInplace and ``h`` has no
other reader): the encoder holds half a copy for one node instead of a whole one.

Same values: a float32 above 65504 casts to 65504 below 65520 and to +Inf from there (round to nearest even), and
the Clip in float16 brings +Inf back to 65504, which is what clamping first gives; likewise below −65504; NaN,
zeros, subnormals and everything in range are untouched by either clamp (tests/test_fp16_cast_first.py checks it
bit for bit against the old form). The decode is unchanged.

Not the default form: on other graphs the different buffer sizes move ORT's best-fit layout the other way
(lossy leaky_vgg's stop-39 plan: P 10.6 → 11.8 MiB predicted with every encoder swapped). So the ORT-defaults
budget mode prices each lossy candidate with and without it (planner/growth_budget.py ``post_variants``) and
``transform`` applies it where the plan's record says so (``fp16_cast_first``), after its last passes, as priced.
The node that reads the stash keeps the encoder's name (``NATIVE_ENCODER_SUFFIX``), so passes that recognise a
native encoder by its first node still do.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .encode_stash import _FP16_MAX, NATIVE_ENCODER_SUFFIX
from .records import PassRecord

LO_NAME, HI_NAME = "onnxcomp_fp16_min_h", "onnxcomp_fp16_max_h"


def _scalar(v: ir.Value | None) -> float | None:
    if v is None or v.const_value is None:
        return None
    a = v.const_value.numpy()
    return float(a.reshape(-1)[0]) if a.size == 1 else None


def native_fp16_encoders(graph: ir.Graph) -> list[tuple[ir.Node, ir.Node]]:
    """(Clip, Cast) pairs of native fp16 encoders in Clip-then-Cast form: a float32 Clip to ±65504 named with
    ``NATIVE_ENCODER_SUFFIX`` whose one reader is a Cast to float16."""
    out = []
    for clip in graph:
        if clip.op_type != "Clip" or clip.domain not in ("", "ai.onnx") or not clip.name.endswith(NATIVE_ENCODER_SUFFIX):
            continue
        if len(clip.inputs) != 3 or _scalar(clip.inputs[1]) != -_FP16_MAX or _scalar(clip.inputs[2]) != _FP16_MAX:
            continue
        y = clip.outputs[0]
        readers = [u.node for u in y.uses()]
        if len(readers) != 1 or y in graph.outputs:
            continue
        cast = readers[0]
        if cast.op_type != "Cast" or cast.attributes.get_int("to", 0) != ir.DataType.FLOAT16.value:
            continue
        out.append((clip, cast))
    return out


class Fp16CastFirstPass(OnnxcompPass):
    """Every native fp16 encoder ``Clip → Cast`` becomes ``Cast → Clip`` in float16 (module docstring)."""

    name = "fp16_cast_first"

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        graph = model.graph
        pairs = native_fp16_encoders(graph)
        if not pairs:
            return outcome
        for name, value in ((LO_NAME, -_FP16_MAX), (HI_NAME, _FP16_MAX)):
            if graph.initializers.get(name) is None:
                arr = np.array(value, dtype=np.float16)
                v = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT16), shape=ir.Shape([]),
                             const_value=ir.tensor(arr, name=name))
                graph.register_initializer(v)
        lo, hi = graph.initializers[LO_NAME], graph.initializers[HI_NAME]
        for clip, cast in pairs:
            x, clipped, payload = clip.inputs[0], clip.outputs[0], cast.outputs[0]
            names = (clip.name, cast.name, clipped.name, payload.name)
            # The same two nodes, same places and tensor names, operations swapped: the node reading the stash (named
            # as the encoder) casts; the second clamps the float16 values and writes the payload (readers unchanged).
            new_cast = ir.Node("", "Cast", [x], attributes=[ir.AttrInt64("to", ir.DataType.FLOAT16.value)],
                               outputs=[ir.Value(type=ir.TensorType(ir.DataType.FLOAT16), shape=clipped.shape)])
            new_clip = ir.Node("", "Clip", [new_cast.outputs[0], lo, hi],
                               outputs=[ir.Value(type=payload.type, shape=payload.shape)])
            graph.insert_before(clip, new_cast)
            graph.insert_before(cast, new_clip)
            payload.replace_all_uses_with(new_clip.outputs[0])
            for node in (cast, clip):
                for k in range(len(node.inputs)):
                    node.replace_input_with(k, None)
            graph.remove([cast, clip], safe=False)
            clipped.name = payload.name = None
            new_cast.name, new_clip.name, new_cast.outputs[0].name, new_clip.outputs[0].name = names
            new_clip.name = names[1].replace("__encode_fp16_cast", "__encode_fp16_clip")
            outcome.records.append(PassRecord("scratch", self.name, x.name or names[0],
                                              {"fp16_encoder": names[0], "form": "cast-first", "exact": True}))
        for init in [v for v in (graph.initializers.get("onnxcomp_fp16_min"), graph.initializers.get("onnxcomp_fp16_max"))
                     if v is not None and not v.uses()]:
            graph.initializers.pop(init.name)
        outcome.modified = bool(outcome.records)
        return outcome
