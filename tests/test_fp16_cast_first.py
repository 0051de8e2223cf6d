"""passes/fp16_cast_first.py: native fp16 encoders as Cast then Clip in float16 — same payload bits, no float32
clip copy, the Clip in place under ORT's reuse plan (a hand-written graph's pattern block shrinks)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from graphs import two_conv
from onnx import TensorProto, helper

from onnxcomp.passes import DprPass
from onnxcomp.passes.base import check_model, run_passes
from onnxcomp.passes.encode_stash import NATIVE_ENCODER_SUFFIX
from onnxcomp.passes.fp16_cast_first import Fp16CastFirstPass, native_fp16_encoders
from onnxcomp.planner import ort_pattern


def _cast_first(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list]:
    m = ir.serde.deserialize_model(model)
    log = run_passes(m, [Fp16CastFirstPass()])
    return ir.serde.serialize_model(m), log.records


def test_the_encoder_casts_first_and_clamps_in_float16() -> None:
    encoded = DprPass(min_bytes=0).run(two_conv()).model
    (rec,) = [r for r in DprPass(min_bytes=0).run(two_conv()).records if r["tensor"] == "y"]
    out, records = _cast_first(encoded)
    check_model(out, "fp16_cast_first")
    assert [r["fp16_encoder"] for r in records] == [rec["encoder"]]
    nodes = {n.name: n for n in out.graph.node}
    enc = nodes[rec["encoder"]]
    assert enc.name.endswith(NATIVE_ENCODER_SUFFIX) and enc.op_type == "Cast" and list(enc.input) == ["y"]
    assert helper.get_attribute_value(enc.attribute[0]) == TensorProto.FLOAT16
    (clip,) = [n for n in out.graph.node if enc.output[0] in n.input]
    assert clip.op_type == "Clip" and list(clip.output) == list(rec["payload"])    # the payload keeps its name
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in out.graph.initializer}
    assert [inits[x].dtype for x in clip.input[1:]] == [np.float16, np.float16]
    assert [float(inits[x]) for x in clip.input[1:]] == [-65504.0, 65504.0]
    assert "onnxcomp_fp16_min" not in inits and "onnxcomp_fp16_max" not in inits   # the float32 bounds, unused
    assert not any(n.op_type == "Clip" and "y" in n.input for n in out.graph.node)   # no float32 copy of y
    again, more = _cast_first(out)
    assert not more and not native_fp16_encoders(ir.serde.deserialize_model(again).graph)


def _encoder_graph(cast_first: bool) -> onnx.ModelProto:
    """x → Neg → y; Abs(y) is y's other forward reader (so the encoder cannot work in place on y); the encoder in
    either form (cast first: the nodes the pass writes, test above); the decoding Cast."""
    n = 4096
    if cast_first:
        enc = [helper.make_node("Cast", ["y"], ["c"], to=TensorProto.FLOAT16, name=f"y{NATIVE_ENCODER_SUFFIX}"),
               helper.make_node("Clip", ["c", "lo", "hi"], ["p"], name="y__encode_fp16_clip")]
        bound = TensorProto.FLOAT16
    else:
        enc = [helper.make_node("Clip", ["y", "lo", "hi"], ["c"], name=f"y{NATIVE_ENCODER_SUFFIX}"),
               helper.make_node("Cast", ["c"], ["p"], to=TensorProto.FLOAT16, name="y__encode_fp16_cast")]
        bound = TensorProto.FLOAT
    lo, hi = (np.array(v, dtype=helper.tensor_dtype_to_np_dtype(bound)) for v in (-65504.0, 65504.0))
    nodes = [helper.make_node("Neg", ["x"], ["y"], name="neg"), *enc,
             helper.make_node("Abs", ["y"], ["z"], name="abs"),
             helper.make_node("Cast", ["p"], ["d"], to=TensorProto.FLOAT, name="dec")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [n]),
                           helper.make_tensor_value_info("d", TensorProto.FLOAT, [n])],
                          [onnx.numpy_helper.from_array(lo, "lo"), onnx.numpy_helper.from_array(hi, "hi")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def test_same_values_bit_for_bit_as_clip_then_cast() -> None:
    rng = np.random.default_rng(0)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65519.99, 65520, 1e9, -65519.99, -65520,
                        2**-25, 1.5 * 2**-24, 2**-26, 1e-45], np.float32)
    x = np.concatenate([special, (rng.standard_normal(4096 - special.size)
                                  * 10.0 ** rng.integers(-9, 7, 4096 - special.size)).astype(np.float32)])
    got = []
    for cast_first in (False, True):
        sess = ort.InferenceSession(_encoder_graph(cast_first).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        got.append(np.concatenate([sess.run(["d"], {"x": v})[0] for v in (x, -x)]))
    assert np.array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    assert np.abs(got[1][np.isfinite(got[1])]).max() == 65504.0     # ±Inf clamped in both


def test_ort_reuse_plan_clamps_in_place_and_the_pattern_block_shrinks() -> None:
    sizes = {}
    for cast_first in (False, True):
        m = _encoder_graph(cast_first)
        shapes = ort_pattern._declared(m)
        plan = ort_pattern.allocation_plan(m, shapes)
        if cast_first:
            assert plan.kind["p"] == "inplace"       # the float16 Clip writes over the Cast's output
        sizes[cast_first] = ort_pattern.pattern_block(plan).size
    # Clip then Cast: x→y (16 KiB), c (16 KiB) beside y, p (8 KiB); cast first: h (8 KiB) clamped in place
    assert sizes[True] < sizes[False]
