"""ConvTransposeAsConvPass (on a backward-looking graph: a ReluGrad feeds it): a stride-1 ConvTranspose (ORT's one-image col buffer outside the memory pattern) as
a Conv over flipped, transposed weights — the same values up to rounding; strided, grouped and small ones left."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.helper
import onnx.parser
import onnx.shape_inference
import pytest

from onnxcomp.passes.conv_transpose_as_conv import ConvTransposeAsConvPass, conv_pads, conv_transpose_col_bytes


def _graph(strides: int = 1, pads: int = 1, dil: int = 1, group: int = 1, k: int = 3) -> onnx.ModelProto:
    h = 8
    out = (h - 1) * strides - 2 * pads + dil * (k - 1) + 1
    text = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
g (float[2,6,{h},{h}] dy, float[6,{4 // group},{k},{k}] w) => (float[2,4,{out},{out}] y, float s)
{{
  d = com.microsoft.ReluGrad (dy, dy)
  t = ConvTranspose <pads=[{pads},{pads},{pads},{pads}], strides=[{strides},{strides}], dilations=[{dil},{dil}], group={group}> (d, w)
  y = Identity (t)
  s = ReduceSum <keepdims=0> (t)
}}
"""
    model = onnx.parser.parse_model(text)
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("d", onnx.TensorProto.FLOAT, [2, 6, h, h]))
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, group: int = 1, k: int = 3) -> list[np.ndarray]:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"dy": rng.standard_normal((2, 6, 8, 8)).astype(np.float32),
             "w": rng.standard_normal((6, 4 // group, k, k)).astype(np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["y", "s"], feeds)


@pytest.mark.parametrize(("pads", "dil", "k"), [(1, 1, 3), (0, 1, 3), (2, 2, 3), (0, 1, 1), (2, 1, 5)])
def test_conv_over_flipped_weights_gives_the_same_values(pads: int, dil: int, k: int) -> None:
    g = _graph(pads=pads, dil=dil, k=k)
    result = ConvTransposeAsConvPass().run(g)
    assert result.modified and len(result.records) == 1
    ops = [n.op_type for n in result.model.graph.node]
    assert "ConvTranspose" not in ops and ops.count("Conv") == 1
    assert result.records[0]["col_buffer_bytes"] == conv_transpose_col_bytes([2, 6, 8, 8], [6, 4, k, k])
    a, b = _run(g, k=k), _run(result.model, k=k)
    for x, y in zip(a, b):
        assert x.shape == y.shape
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-4)


def test_leaves_strided_grouped_and_small_ones() -> None:
    for g, why in ((_graph(strides=2), "strided"), (_graph(group=2), "grouped")):
        r = ConvTransposeAsConvPass().run(g)
        assert not r.modified and any(why in s.reason for s in r.skipped)
    col = conv_transpose_col_bytes([2, 6, 8, 8], [6, 4, 3, 3])
    assert not ConvTransposeAsConvPass(col).run(_graph()).modified
    assert ConvTransposeAsConvPass(col - 1).run(_graph()).modified


def test_conv_pads() -> None:
    assert conv_pads([3, 3], [1, 1, 1, 1], [1, 1]) == [1, 1, 1, 1]
    assert conv_pads([3, 3], [0, 0, 0, 0], [2, 2]) == [4, 4, 4, 4]
    assert conv_pads([3, 3], [3, 0, 0, 0], [1, 1]) is None


def test_keeps_a_lifted_output_declaration_on_a_view() -> None:
    """A ConvTranspose output declared with trailing axes of 1 (a lifted declaration: same elements): the Conv is
    declared as ORT infers it (4-D) and a Reshape view keeps the declaration under the old name; a Conv declared
    lifted is a shape conflict (ORT: "Error merging shape info ... lenient merge")."""
    g = _graph()
    for v in g.graph.value_info:
        if v.name == "t":
            v.type.tensor_type.shape.dim.add().dim_value = 1
    result = ConvTransposeAsConvPass().run(g)
    out = result.model
    declared = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in out.graph.value_info}
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert declared[conv.output[0]] == [2, 4, 8, 8]
    view = next(n for n in out.graph.node if n.output[0] == "t")
    assert view.op_type == "Reshape" and declared["t"] == [2, 4, 8, 8, 1]
    onnx.shape_inference.infer_shapes(out, strict_mode=True)
