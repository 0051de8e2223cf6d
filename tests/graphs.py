"""Small hand-written training graphs (onnx.parser) in the shape ORT's gradient builder gives them, for
fast unit tests of single passes — no torch export, no artifact generation."""
from __future__ import annotations

import onnx
import onnx.parser

# onnx.parser takes no dots in names; ORT names a parameter's gradient buffer "<param>_grad.accumulation.buffer".
_BUFFERS = {"w1_buf": "w1_grad.accumulation.buffer", "w2_buf": "w2_grad.accumulation.buffer"}

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


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    for vi in model.graph.input:
        vi.name = _BUFFERS.get(vi.name, vi.name)
    for node in model.graph.node:
        node.input[:] = [_BUFFERS.get(i, i) for i in node.input]
    # Node names, as the gradient builder gives them (passes name new nodes after them).
    for k, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{k}"
    return model


def two_conv() -> onnx.ModelProto:
    return parse(TWO_CONV)


def conv_pool() -> onnx.ModelProto:
    return parse(CONV_POOL)
