"""The encoding passes on onnx-ir (passes/encode_stash.py and its subclasses) on small hand-written graphs:
the Clip gradient's interval mask, Dropout masks as bits, fixed-rate zfp, the payload typing ORT's memory
planner needs, and an honest ``modified`` when run in place on an ``ir.Model``. Fast: no torch, no ORT."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import _CONV, FC_DROPOUT, parse, two_conv

from onnxcomp.analysis import analyze_model
from onnxcomp.custom_ops import contract, zfp
from onnxcomp.metadata import PLAN_METADATA_KEY
from onnxcomp.passes import DropoutMaskPass, FixedRatePass, IntervalMaskPass, SignBitsPass
from onnxcomp.passes.base import check_model, ungated_nodes
from onnxcomp.passes.editor import IrGraphEditor
from onnxcomp.passes.encode_stash import is_native_bits_decode

# Conv -> Clip(0, 6) (ReLU6) -> Conv, with the Clip gradient as ORT 1.19 builds it: the comparisons on the
# Clip input, their And, the float mask and the Mul with dY.
CONV_CLIP = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4,4,3,3] w2, float[4,3,3,3] w1_buf, float[4,4,3,3] w2_buf,
       bool lazy_reset_grad, float loss_grad) => (bool w1_flag, bool w2_flag)
<float lo = {{0.0}}, float hi = {{6.0}}>
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  y = Clip (x, lo, hi)
  z = Conv <pads=[1,1,1,1]> (y, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dy, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dz, y, w2)
  ge = GreaterOrEqual (x, lo)
  le = LessOrEqual (x, hi)
  m = And (ge, le)
  mf = Cast <to=1> (m)
  dx = Mul (dy, mf)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
  w2_flag = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_flag = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""

def _ours(model: onnx.ModelProto, role: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if (op := contract.codec_op(n.domain, n.op_type)) and op.role == role]


def _producer(model: onnx.ModelProto, tensor: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if tensor in n.output)


def _gated(model: onnx.ModelProto) -> None:
    assert ungated_nodes(list(model.graph.node), analyze_model(model).boundary) == []


def test_interval_mask_replaces_the_comparison_chain() -> None:
    result = IntervalMaskPass().run(parse(CONV_CLIP))
    out = result.model
    check_model(out, "interval_mask")
    _gated(out)
    (rec,) = result.records
    assert rec["codec"] == "intervalmask" and rec["tensor"] == "mf" and rec["encoded_tensor"] == "x"
    assert rec["params"] | {"tensor": None} == {"lo": 0.0, "hi": 6.0, "tensor": None}
    ops = [n.op_type for n in out.graph.node]
    # The comparisons, their And and the float Cast of the mask are gone: x is freed after the Clip.
    assert not {"GreaterOrEqual", "LessOrEqual", "And"} & set(ops)
    (enc,), (dec,) = _ours(out, "encode"), _ours(out, "decode")
    names = [n.name for n in out.graph.node]
    assert names.index(enc.name) == names.index(_producer(out, "x").name) + 1
    mul = next(n for n in out.graph.node if n.op_type == "Mul")
    cast = _producer(out, mul.input[1])
    assert cast.op_type == "Cast" and cast.input[0] == dec.output[0]
    assert names.index(dec.name) < names.index(cast.name) < names.index(mul.name)
    # The Clip reads x through the encoder's anchor, so it cannot run before the encoder.
    clip = next(n for n in out.graph.node if n.op_type == "Clip")
    assert _producer(out, clip.input[0]).input[1] == enc.output[contract.ENCODER_ANCHOR]


def test_dropout_mask_held_as_bits_anchors_the_dropout_output() -> None:
    result = DropoutMaskPass().run(parse(FC_DROPOUT))
    out = result.model
    check_model(out, "dropout_mask")
    _gated(out)
    (rec,) = result.records
    assert rec["codec"] == "bitmask" and rec["tensor"] == "mask" and rec["predicted_bytes"] == (2 * 64 + 7) // 8 + 16
    (enc,), (dec,) = _ours(out, "encode"), _ours(out, "decode")
    assert enc.input[0] == "mask"
    z = next(n for n in out.graph.node if n.op_type == "Gemm" and "z" in n.output)
    assert _producer(out, z.input[0]).input == ["r", enc.output[contract.ENCODER_ANCHOR]]
    grad = next(n for n in out.graph.node if n.op_type == "DropoutGrad")
    assert grad.input[1] == dec.output[0]
    assert _producer(out, dec.input[contract.DECODER_TRIGGER]).op_type == "Slice"


def test_fixed_rate_stored_payloads_get_lengths_of_their_own() -> None:
    """zfp's outlier arrays are sized by the data, so the payload store holds the whole payload (store=inline)
    and ORT gets empty arrays and a token frame. Its fixed-size arrays (header, words) must then not carry zfp's
    static sizes: ORT's buffer reuse would hand such an empty buffer to a later tensor of that shape and abort
    the step ("Shape mismatch attempting to re-use buffer. {0} != {8192}", NOTES-lossydef.md). Each payload
    gets a symbolic length no other tensor has; the plan's size hints still size it for the predictor."""
    result = FixedRatePass(rate=8, min_bytes=0).run(two_conv())
    out = result.model
    check_model(out, "fixed_rate")
    (rec,) = result.records
    assert rec["codec"] == "zfp" and rec["params"]["rate"] == 8 and rec["params"]["store"] == "inline"
    (enc,) = _ours(out, "encode")
    dims = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in out.graph.value_info}
    payload = enc.output[:contract.ENCODER_ANCHOR]
    assert len(payload) == 5 and all(dims[p] == [f"{p}_len"] for p in payload)
    assert dims[enc.output[contract.ENCODER_ANCHOR]] == [4]
    hints = json.loads({p.key: p.value for p in out.metadata_props}[PLAN_METADATA_KEY])
    header, data = payload[:2]
    assert hints[header] == zfp.HEADER_BYTES and hints[data] == rec["payload"][data] > 0


@pytest.mark.parametrize("native", [False, True])
def test_in_place_on_ir_reports_modified_honestly(native: bool) -> None:
    model = ir.serde.deserialize_model(two_conv())
    first = SignBitsPass(native=native)(model)
    assert first.modified and first.model is model and [r.subject for r in first.records] == ["x"]
    relu_grad = model.graph.node("ReluGrad_7")
    mask_float = relu_grad.inputs[1]
    decoder = mask_float.producer().inputs[0].producer()
    assert mask_float.producer().op_type == "Cast" and (is_native_bits_decode(decoder) if native else
                                                         decoder.op_type == contract.decode_op("bitmask"))
    before = onnx.printer.to_text(ir.serde.serialize_model(model))
    again = SignBitsPass(native=native)(model)
    assert not again.modified and not again.records
    assert onnx.printer.to_text(ir.serde.serialize_model(model)) == before


def test_editor_shared_tensor_and_untyped_nodes() -> None:
    graph = ir.serde.deserialize_model(two_conv()).graph
    editor = IrGraphEditor(graph)
    lo = editor.shared_tensor("c_lo", np.array(-1.5, dtype=np.float32))
    assert editor.shared_tensor("c_lo", np.array(7.0, dtype=np.float32)) is lo      # added once, by name
    assert lo.dtype == ir.DataType.FLOAT and lo.shape == ir.Shape([]) and "c_lo" in graph.initializers
    node = editor.untyped("Reshape", [graph.node("Relu_1").outputs[0], None], ["flat"], name="n")
    assert node.outputs[0].name == "flat" and node.outputs[0].type is None and editor.nodes[-1] is node
