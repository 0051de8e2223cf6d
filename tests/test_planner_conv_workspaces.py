"""The planner's conv workspaces: the forward Conv's im2col buffer as MLAS allocates it (the whole image only
where the filters outnumber the output pixels, else a small segmented buffer), and when the planner blocks a
ConvGrad (passes/split_conv_grad.py): only where the workspace saved beats the blocks' copies."""
from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx.parser
import onnx.shape_inference

from onnxcomp.analysis import analyze_model
from onnxcomp.planner.auto import (SEGMENTED_CONV_WORKSPACE, _conv_grad_split_pays, conv_transpose_workspace,
                                   conv_workspace, predicted_live)


def _conv_graph(filters: int, side: int, cin: int = 16, batch: int = 2) -> onnx.ModelProto:
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[{batch},{cin},{side},{side}] input, float[{filters},{cin},3,3] w, float loss_grad)
      => (float[{filters},{cin},3,3] w_grad)
{{
  y = Conv <pads=[1,1,1,1]> (input, w)
  loss = ReduceSum <keepdims=0> (y)
  y_shape = Shape (y)
  dy = Expand (loss_grad, y_shape)
  dx, w_grad, db = com.microsoft.ConvGrad <pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1,
                                           kernel_shape=[3,3]> (dy, input, w)
}}
"""
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(text))
    model.graph.value_info.append(oh.make_tensor_value_info("dy", onnx.TensorProto.FLOAT, [batch, filters, side, side]))
    return model


def test_forward_conv_workspace_follows_mlas_algorithm() -> None:
    # 64 filters, 40x40 = 1600 pixels: segmented expansion (measured: the conv peaks at its output + < 0.1 MiB)
    model = _conv_graph(64, 40)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    full = 16 * 9 * 40 * 40 * 4
    assert conv_workspace(analyze_model(model), conv) == min(full, SEGMENTED_CONV_WORKSPACE) < full
    # 256 filters, 10x10 = 100 pixels: MLAS expands the whole image
    model = _conv_graph(256, 10)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    assert conv_workspace(analyze_model(model), conv) == 16 * 9 * 10 * 10 * 4


def test_convgrad_blocked_only_where_it_pays() -> None:
    # 64 input channels, 40x40, batch 2, dX needed: workspace 3.5 MiB; dX 0.8 MiB: blocks pay at 256 KiB
    model = _conv_graph(64, 40, cin=64)
    at = next(i for i, n in enumerate(model.graph.node) if n.op_type == "ConvGrad")
    assert _conv_grad_split_pays(model, at, 256 << 10)
    # ... not above its workspace
    assert not _conv_grad_split_pays(model, at, 4 << 20)
    # a full batch of 16: 4 input channels at 8x8, a 9 KB workspace beside 16 KB of dX: the blocks' copies
    # (one more dX) outweigh the 7 KB saved
    small = _conv_graph(6, 8, cin=4, batch=16)
    at = next(i for i, n in enumerate(small.graph.node) if n.op_type == "ConvGrad")
    assert not _conv_grad_split_pays(small, at, 1024)
    # not a ConvGrad
    assert not _conv_grad_split_pays(model, 0, 256 << 10)


def _conv_transpose_graph(side: int, c: int = 64) -> onnx.ModelProto:
    # A chunk's input gradient as chunk_input_chain writes it, dX = ConvTranspose(dY, W), beside the ConvGrad for dW.
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[1,{c},{side},{side}] input, float[{c},{c},3,3] w, float loss_grad) => (float[{c},{c},3,3] w_grad, float s)
{{
  y = Conv <pads=[1,1,1,1]> (input, w)
  loss = ReduceSum <keepdims=0> (y)
  y_shape = Shape (y)
  dy = Expand (loss_grad, y_shape)
  dx = ConvTranspose <pads=[1,1,1,1], strides=[1,1]> (dy, w)
  s = ReduceSum <keepdims=0> (dx)
  dx2, w_grad, db = com.microsoft.ConvGrad <pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1,
                                            kernel_shape=[3,3]> (dy, input, w)
}}
"""
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(text))
    model.graph.value_info.append(oh.make_tensor_value_info("dy", onnx.TensorProto.FLOAT, [1, c, side, side]))
    return model


def test_conv_transpose_col_buffer_is_in_the_predicted_peak() -> None:
    # ORT allocates (C_out/group)·kh·kw × H_in·W_in floats per image on every call: 3.5 MiB at 64 channels, 40x40,
    # where Conv's segmented buffer for the same shapes is 128 KiB
    model = _conv_transpose_graph(40)
    node = next(n for n in model.graph.node if n.op_type == "ConvTranspose")
    col = 64 * 9 * 40 * 40 * 4
    assert conv_transpose_workspace(analyze_model(model), node) == col
    # the live curve carries it at the ConvTranspose node, on top of its input and output (0.4 MiB each; without
    # the buffer the node's live bytes are ~1.3 MiB)
    seen, live = predicted_live(model)
    at = next(i for i, n in enumerate(seen.graph.node) if n.op_type == "ConvTranspose")
    maps = 2 * 64 * 40 * 40 * 4
    assert live[at] >= col + maps
