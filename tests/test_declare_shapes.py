"""DeclareShapesPass: static shapes ORT 1.19's own inference misses (a ReLU6 gradient's GreaterOrEqual/LessOrEqual
mask chain) are declared, so ORT's memory pattern plans those tensors instead of allocating them during the step;
values stay bit for bit."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxcomp.passes.declare_shapes import DeclareShapesPass, undeclared_static

F = TensorProto.FLOAT
SHAPE = [8, 16, 4, 4]


def _clip_backward_like() -> onnx.ModelProto:
    """Forward ``Clip(x, 0, 6)`` and a sum; a "backward" seeded by ``loss_grad`` that masks the incoming gradient
    with the ReLU6 gradient ORT's gradient builder writes (GreaterOrEqual, LessOrEqual, And, Cast, Mul)."""
    x = helper.make_tensor_value_info("x", F, SHAPE)
    seed = helper.make_tensor_value_info("loss_grad", F, [1])
    dx = helper.make_tensor_value_info("dx", F, SHAPE)
    lo, hi = helper.make_tensor("lo", F, [], [0.0]), helper.make_tensor("hi", F, [], [6.0])
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="relu6"),
             helper.make_node("ReduceSum", ["y"], ["s"], name="sum", keepdims=0),
             helper.make_node("Mul", ["s", "loss_grad"], ["ds"], name="seeded"),
             helper.make_node("Mul", ["x", "ds"], ["dy"], name="dy"),
             helper.make_node("GreaterOrEqual", ["x", "lo"], ["ge"], name="ge"),
             helper.make_node("LessOrEqual", ["x", "hi"], ["le"], name="le"),
             helper.make_node("And", ["ge", "le"], ["inside"], name="and"),
             helper.make_node("Cast", ["inside"], ["mask"], name="cast", to=F),
             helper.make_node("Mul", ["dy", "mask"], ["dx"], name="masked")]
    graph = helper.make_graph(nodes, "g", [x, seed], [dx], [lo, hi],
                              value_info=[helper.make_tensor_value_info("dy", F, SHAPE)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort_shape(model: onnx.ModelProto, name: str) -> list:
    """The shape ORT's session has for ``name`` (what its memory planning resolves sizes from): the value is
    exposed as an extra, untyped graph output, so ORT reports its own NodeArg's shape ([] when it has none)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(onnx.ValueInfoProto(name=name))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return next(o.shape for o in session.get_outputs() if o.name == name)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()    # ORT's defaults: arena, memory pattern, buffer reuse
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_declares_the_mask_chain_ort_leaves_shapeless_and_changes_no_value() -> None:
    model = _clip_backward_like()
    # ORT 1.19 infers no shape for GreaterOrEqual/LessOrEqual (nor for what reads them): such tensors are
    # allocated outside the memory pattern, during the step. The Mul reading the mask has a declared shape.
    assert _ort_shape(model, "mask") == [] and _ort_shape(model, "ge") == []
    assert _ort_shape(model, "dy") == SHAPE

    ir_model = ir.serde.deserialize_model(model)
    found = {v.name: shape for v, shape, _ in undeclared_static(ir_model)}
    chain = {"ge", "le", "inside", "mask"}
    assert chain <= set(found) and "dx" not in found and "dy" not in found     # graph output, declared
    assert all(found[n] == tuple(SHAPE) for n in chain)
    outcome = DeclareShapesPass().call(ir_model)
    assert outcome.modified and len(outcome.records) == 1 and chain <= set(outcome.records[0]["values"])
    assert not DeclareShapesPass().call(ir_model).modified        # honest: nothing left to declare

    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten, full_check=True)
    declared = {v.name: v.type.tensor_type for v in rewritten.graph.value_info}
    assert declared["ge"].elem_type == TensorProto.BOOL and declared["mask"].elem_type == F
    for name in ("ge", "le", "inside", "mask"):
        assert _ort_shape(rewritten, name) == SHAPE           # ORT now plans the chain in its pattern
    assert [n.op_type for n in rewritten.graph.node] == [n.op_type for n in model.graph.node]

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(SHAPE) * 4).astype(np.float32)
    x.flat[:4] = [0.0, -0.0, 6.0, np.nan]      # the mask's edges, and a NaN
    feeds = {"x": x, "loss_grad": np.array([0.5], np.float32)}
    np.testing.assert_array_equal(_run(rewritten, feeds), _run(model, feeds))


def test_a_declared_shape_is_left_as_it_is() -> None:
    """An output that declares a shape, symbolic or not, is ORT's to read as declared."""
    model = _clip_backward_like()
    model.graph.value_info.append(helper.make_tensor_value_info("le", TensorProto.BOOL, ["n", 16, 4, 4]))
    ir_model = ir.serde.deserialize_model(model)
    found = {v.name for v, _, _ in undeclared_static(ir_model)}
    assert "le" not in found and {"ge", "inside", "mask"} <= found
    DeclareShapesPass().call(ir_model)
    le = next(v for n in ir_model.graph for v in n.outputs if v.name == "le")
    assert [str(d) for d in le.shape] == ["n", "16", "4", "4"]


def test_conv_grad_weight_and_bias_gradients_are_declared() -> None:
    """ConvGrad's schema infers only dX: its dW and dB (ResNet-18: up to 9 MiB per layer) get their shapes."""
    shapes = {"dy": [2, 8, 6, 6], "x": [2, 4, 6, 6], "w": [8, 4, 3, 3]}
    ins = [helper.make_tensor_value_info(n, F, s) for n, s in shapes.items()]
    outs = [helper.make_tensor_value_info(n, F, None) for n in ("dx_out", "dw_out", "db_out")]
    nodes = [helper.make_node("ConvGrad", ["dy", "x", "w"], ["dx", "dw", "db"], domain="com.microsoft",
                              kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1,
                              auto_pad="NOTSET", name="cg")] + \
            [helper.make_node("Identity", [o], [f"{o}_out"]) for o in ("dx", "dw", "db")]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    assert _ort_shape(model, "dw") == [] and _ort_shape(model, "db") == []
    ir_model = ir.serde.deserialize_model(model)
    assert DeclareShapesPass().call(ir_model).modified
    rewritten = ir.serde.serialize_model(ir_model)
    assert _ort_shape(rewritten, "dw") == [8, 4, 3, 3] and _ort_shape(rewritten, "db") == [8]
