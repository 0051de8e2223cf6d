"""Encoders of a backward-placed view of a forward tensor (passes/early_encode.py): moved to where the tensor
is made, its forward readers wait on them, so under both ORT orders the encoder runs before backward."""
from __future__ import annotations

import onnx
import onnx.parser

from custom_ops import contract
from conftest import tensor_ancestors
from onnxcomp.analysis.execution_order import ort_order
from onnxcomp.passes.early_encode import EarlyEncodePass

ENCODE = contract.encode_op("dpr_fp8")

# ORT's gradient of an N-D MatMul reads its input through a 2-D Reshape it places among the backward nodes;
# the encoder sits right after that view (node names are arbitrary: the pass goes by data flow).
GRAPH = f"""
<ir_version: 8, opset_import: ["" : 17, "{contract.DOMAIN}" : 1]>
g (float[2,3,4] x, float[4,5] w, float[2,3,5] Y_grad) => (float[2,3,5] y, float[4,5] dw, float[6,4] decoded) {{
    s = Relu (x)
    y = MatMul (s, w)
    flat_y = Constant <value = int64[2] {{6, 5}}> ()
    flat_s = Constant <value = int64[2] {{6, 4}}> ()
    gy = Mul (Y_grad, y)
    dy = Reshape (gy, flat_y)
    a2d = Reshape (s, flat_s)
    payload, anchor = {contract.DOMAIN}.{ENCODE} (a2d)
    decoded = Identity (payload)
    dw = Gemm <transA = 1> (a2d, dy)
}}
"""


def test_late_view_encoder_runs_in_the_forward_under_both_orders():
    model = onnx.parser.parse_model(GRAPH)
    result = EarlyEncodePass().run(model)
    (rec,) = result.records
    assert rec["op"] == ENCODE
    g = result.model.graph
    names = [n.output[0] for n in g.node]
    # The view and its encoder right after the tensor's producer (behind the view's shape constant); the
    # forward MatMul reads a gated view of the tensor.
    assert names.index("s") < names.index("a2d") < names.index("payload") < names.index("y")
    matmul = next(n for n in g.node if n.op_type == "MatMul")
    assert matmul.input[0] != "s"

    assert "anchor" in tensor_ancestors(g, matmul.input[0])
    for order in ("default", "priority"):
        run = [g.node[i].output[0] for i in ort_order(result.model, order)]
        assert run.index("payload") < run.index("dw"), order      # before the backward product
        assert run.index("payload") < run.index("y"), order
    # Idempotent, and an encoder something already waits for is left alone.
    assert not EarlyEncodePass().run(result.model).records
