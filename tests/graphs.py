"""Small hand-written training graphs (onnx.parser) in the shape ORT's gradient builder gives them, for
fast unit tests of single passes — no torch export, no artifact generation."""
from __future__ import annotations

from string import Template

import onnx
import onnx.parser

# onnx.parser takes no dots in names; ORT names a parameter's gradient buffer "<param>_grad.accumulation.buffer".
_BUFFERS = {"w1_buf": "w1_grad.accumulation.buffer", "w2_buf": "w2_grad.accumulation.buffer",
            "w1_out": "w1_grad.accumulation.out", "w2_out": "w2_grad.accumulation.out"}

_CONV = 'pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1, kernel_shape=[3,3]'

# Conv -> Relu -> Conv -> ReduceSum, its backward, and the two accumulators ORT appends at the end.
# Stashed: x (ReluGrad reads the ReLU input) and y (the second ConvGrad reads the ReLU output).
TWO_CONV = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4,4,3,3] w2, float[4,3,3,3] w1_buf, float[4,4,3,3] w2_buf,
       bool lazy_reset_grad, float loss_grad) => (bool w1_flag, bool w2_flag)
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  y = Relu (x)
  z = Conv <pads=[1,1,1,1]> (y, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dy, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dz, y, w2)
  dx = com.microsoft.ReluGrad (dy, x)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
  w2_flag = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_flag = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""

# Conv -> Relu -> MaxPool -> ReduceSum: the pool's int64 indices are stashed for MaxPoolGrad (which ORT
# puts in the default domain).
CONV_POOL = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4,3,3,3] w1_buf, bool lazy_reset_grad, float loss_grad)
      => (bool w1_flag)
{{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  y = Relu (x)
  p, idx = MaxPool <kernel_shape=[2,2], strides=[2,2]> (y)
  loss = ReduceSum <keepdims=0> (p)
  p_shape = Shape (p)
  dp = Expand (loss_grad, p_shape)
  dy = MaxPoolGrad (dp, idx)
  dx = com.microsoft.ReluGrad (dy, x)
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
  w1_flag = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}
"""


# Gemm -> Relu -> Gemm (fully connected, no bias) -> ReduceSum and its backward, as ORT builds it: the second
# layer's dW = dZᵀ·R is a Gemm read only by its accumulator (what DeferWeightGradientPass and
# SplitWeightPass rewrite); the accumulators output "<param>_grad.accumulation.out" as graph outputs.
_FC = """
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,16] input, float[64,16] w1, float[32,64] w2, float[64,16] w1_buf, float[32,64] w2_buf,
       bool lazy_reset_grad, float loss_grad) => (bool w1_out, bool w2_out)
$constants{
  h = Gemm <transB=1> (input, w1)
  $activation
  z = Gemm <transB=1> (r, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  w2_grad = Gemm <transA=1> (dz, r)
  dr = Gemm (dz, w2)
  $activation_grad
  w1_grad = Gemm <transA=1> (dh, input)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}
"""
TWO_FC = Template(_FC).substitute(constants="", activation="r = Relu (h)",
                                  activation_grad="dh = com.microsoft.ReluGrad (dr, h)")

# Gemm -> Dropout -> Gemm: the bool keep-mask is stashed for DropoutGrad.
FC_DROPOUT = Template(_FC).substitute(constants="<float ratio = {0.5}, bool mode = {1}>\n",
                                      activation="r, mask = Dropout (h, ratio, mode)",
                                      activation_grad="dh = com.microsoft.DropoutGrad (dr, mask, ratio, mode)")


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.name = _BUFFERS.get(vi.name, vi.name)
    for node in model.graph.node:
        node.input[:] = [_BUFFERS.get(i, i) for i in node.input]
        node.output[:] = [_BUFFERS.get(o, o) for o in node.output]
    # Node names, as the gradient builder gives them (passes name new nodes after them).
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
    return model


def two_conv() -> onnx.ModelProto:
    return parse(TWO_CONV)


def conv_pool() -> onnx.ModelProto:
    return parse(CONV_POOL)


def two_fc() -> onnx.ModelProto:
    return parse(TWO_FC)
