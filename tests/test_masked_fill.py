"""Masked fills without Where (passes/masked_fill.py): on a hand-written attention block with ORT's gradient
ops, every broadcasting Where with a constant fill becomes Add / Mul, and ORT's outputs stay the same — the
Softmax output and the products after the gradient bit for bit."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser
import pytest

from onnxcomp.passes.masked_fill import MaskedFillPass

B, H, T, D = 2, 3, 8, 4


def _attention(fill: str, fill_when_true: bool) -> str:
    """softmax(QKᵀ·s masked) → ·V, with ORT's backward of the fill (Where(c, 0, dY) or Where(c, dY, 0)).
    ``fill_when_true``: the condition marks the filled scores (``masked_fill(~tril, F)``), else the kept ones."""
    fwd = "w = Where (c, neg, ss)" if fill_when_true else "w = Where (c, ss, neg)"
    bwd = "dss = Where (c, zero, dw)" if fill_when_true else "dss = Where (c, dw, zero)"
    return f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
attn (float[{B},{H},{T},{D}] q, float[{B},{H},{D},{T}] kt, float[{B},{H},{T},{D}] v, bool[{T},{T}] c,
      float[{B},{H},{T},{D}] Y_grad)
   => (float[{B},{H},{T},{T}] p, float[{B},{H},{T},{T}] dss, float[{B},{H},{T},{D}] dq, float[{B},{H},{D},{T}] dkt) {{
    scale = Constant <value = float {{0.5}}> ()
    neg = Constant <value = float {{{fill}}}> ()
    zero = Constant <value = float {{0.0}}> ()
    s = MatMul (q, kt)
    ss = Mul (s, scale)
    {fwd}
    p = Softmax <axis = -1> (w)
    y = MatMul (p, v)
    dp = com.microsoft.FusedMatMul <transB = 1> (Y_grad, v)
    dw = com.microsoft.SoftmaxGrad_13 <axis = -1> (dp, p)
    {bwd}
    ds = Mul (dss, scale)
    dq = com.microsoft.FusedMatMul <transB = 1> (ds, kt)
    dkt = com.microsoft.FusedMatMul <transA = 1> (q, ds)
}}
"""


def _condition(fill_when_true: bool) -> np.ndarray:
    causal = np.tril(np.ones((T, T), dtype=bool))
    return ~causal if fill_when_true else causal


def _model(fill: str = "-inf", fill_when_true: bool = True, constant: bool = True) -> onnx.ModelProto:
    model = onnx.parser.parse_model(_attention(fill, fill_when_true))
    if constant:     # the exporter's form: the causal mask is an initializer
        c = next(i for i in model.graph.input if i.name == "c")
        model.graph.input.remove(c)
        model.graph.initializer.append(onnx.numpy_helper.from_array(_condition(fill_when_true), "c"))
    return model


def _run(model: onnx.ModelProto, fill_when_true: bool) -> list[np.ndarray]:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {n: (rng.standard_normal(s) * 3).astype(np.float32) for n, s in
             (("q", (B, H, T, D)), ("kt", (B, H, D, T)), ("v", (B, H, T, D)), ("Y_grad", (B, H, T, D)))}
    feeds["q"][0, 0, 1] = -0.0                  # scores of -0: Where keeps them, Add makes them +0
    if any(i.name == "c" for i in model.graph.input):
        feeds["c"] = _condition(fill_when_true)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["p", "dss", "dq", "dkt"], feeds)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int32)


@pytest.mark.parametrize("fill,fill_when_true,constant", [
    ("-inf", True, True),      # GPT's export: masked_fill(~tril, -inf), the mask an initializer
    ("-inf", False, False),    # the kept positions marked, the mask a graph input (made at run time)
    ("-1e9", False, True),     # a finite fill
    ("-1e9", True, False),
])
def test_where_free_masking_keeps_orts_outputs(fill, fill_when_true, constant):
    model = _model(fill, fill_when_true, constant)
    result = MaskedFillPass().run(model)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Where" not in ops and len(result.records) == 2
    assert {r["fill"] for r in result.records} == {0.0, float(fill)}
    assert all(r["exact"] for r in result.records)
    assert all(r["mask"] == ("initializer" if constant else "computed from the condition") for r in result.records)
    # Masks of the condition's shape only ([T, T]): nothing of the scores' size besides the data itself.
    assert all(tuple(i.dims) in ((T, T), ()) for i in result.model.graph.initializer if i.name != "c")
    want = _run(model, fill_when_true)
    got = _run(result.model, fill_when_true)
    p_want, dss_want, *products_want = want
    p_got, dss_got, *products_got = got
    np.testing.assert_array_equal(_bits(p_got), _bits(p_want))              # the probabilities: bit for bit
    np.testing.assert_array_equal(dss_got, dss_want)                        # the gradient: same values ...
    filled = np.broadcast_to(_condition(fill_when_true) == fill_when_true, dss_want.shape)
    np.testing.assert_array_equal(_bits(dss_got)[~filled], _bits(dss_want)[~filled])  # ... bits where kept
    for g, w in zip(products_got, products_want):                           # and the products after it
        np.testing.assert_array_equal(_bits(g), _bits(w))
    # Idempotent: nothing left to rewrite.
    again = MaskedFillPass().run(result.model)
    assert not again.records and not again.modified


def test_wheres_it_cannot_rewrite_exactly_are_left_alone():
    # A nonzero fill read by something else than a Softmax (an Add keeps +0 where Where kept -0).
    other = onnx.parser.parse_model(f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[{B},{T},{T}] x, bool[{T},{T}] c) => (float[{B},{T},{T}] y) {{
        neg = Constant <value = float {{-1e9}}> ()
        y = Where (c, neg, x)
    }}""")
    # A condition as large as the output (its mask would be too: the chunked Dropout's form).
    full = onnx.parser.parse_model(f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[{B},{T},{T}] x, bool[{B},{T},{T}] c) => (float[{B},{T},{T}] y) {{
        zero = Constant <value = float {{0.0}}> ()
        w = Where (c, x, zero)
        y = Softmax <axis = -1> (w)
    }}""")
    for model, reason in ((other, "other ops than Softmax"), (full, "as large as the output")):
        model.graph.input.append(onnx.helper.make_tensor_value_info("Y_grad", onnx.TensorProto.FLOAT, [1]))
        model.graph.node.append(onnx.helper.make_node("Identity", ["Y_grad"], ["g"]))   # a backward pass
        model.graph.output.append(onnx.helper.make_tensor_value_info("g", onnx.TensorProto.FLOAT, [1]))
        result = MaskedFillPass().run(model)
        assert not result.records and any(reason in s.reason for s in result.skipped)
