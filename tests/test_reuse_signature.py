"""ORT's buffer reuse kept from holding forward buffers across the peak (passes/reuse_signature.py) and the
BiasGelu fusion kept out (passes/arena_scratch.py): predicted by the replay, checked on ORT."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxcomp.analysis import analyze_model
from onnxcomp.analysis.execution_order import in_run_order
from onnxcomp.passes.arena_scratch import ArenaScratchPass, fusable_bias_adds
from onnxcomp.passes.editor import IrGraphEditor
from onnxcomp.passes.reuse_signature import (MAX_CONV_SPATIAL, ReuseSignaturePass, _lift, lift_kind, liftable,
                                           max_axes)
from onnxcomp.planner.ort_reuse import ort_signatures, planned_live, reuse_plan

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:  # noqa: ANN001
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=OPSETS)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()    # ORT's defaults: arena, memory pattern, buffer reuse, DEFAULT order
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _replayed(model: onnx.ModelProto) -> tuple[int, int, list]:
    ordered = in_run_order(model, "default")
    analysis = analyze_model(ordered)
    n = len(ordered.graph.node)
    plan = reuse_plan(analysis.buffers(), n, ort_signatures(analysis))
    live = planned_live(plan, n)
    at = int(np.argmax(live))
    return int(live[at]), at, plan


def _forward_backward_like() -> onnx.ModelProto:
    """``a`` (and ``t``) die early; ``big``/``wide`` make the peak; ``late``, of ``a``'s shape, is born after it
    (in the "backward": it reads the ``loss_grad`` seed): ORT's reuse plan hands ``a``'s buffer to ``late`` and
    holds it, dead, across the peak."""
    x = helper.make_tensor_value_info("x", F, [64, 256])
    seed = helper.make_tensor_value_info("loss_grad", F, [1])
    y = helper.make_tensor_value_info("y", F, [64, 256])
    w = helper.make_tensor("w", F, [256, 1024], np.linspace(-1, 1, 256 * 1024, dtype=np.float32))
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"], name="square"),
             helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "w"], ["big"], name="up"),
             helper.make_node("Relu", ["big"], ["wide"], name="relu"),
             helper.make_node("ReduceSum", ["wide"], ["s"], name="sum", keepdims=1),
             helper.make_node("Mul", ["s", "loss_grad"], ["ds"], name="seeded"),
             helper.make_node("Mul", ["x", "ds"], ["late"], name="scale"),
             helper.make_node("Sigmoid", ["late"], ["y"], name="out")]
    return _model(nodes, [x, seed], [y], [w])


def test_replay_holds_a_forward_buffer_for_a_late_tensor_of_its_shape_and_the_pass_releases_it() -> None:
    model = _forward_backward_like()
    before, at, plan = _replayed(model)
    held = [[b.name for b in p.values] for p in plan if p.dead_at(at)]
    assert held in ([["a", "late"]], [["t", "late"]])

    ir_model = ir.serde.deserialize_model(model)
    outcome = ReuseSignaturePass(min_bytes=0).call(ir_model)
    assert outcome.modified and outcome.records
    assert all(r["predicted_reuse_peak_bytes"][1] < r["predicted_reuse_peak_bytes"][0] for r in outcome.records)
    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten, full_check=True)
    after, at2, plan2 = _replayed(rewritten)
    assert after < before and not [p for p in plan2 if p.dead_at(at2) and p.size > 0]

    feeds = {"x": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32),
             "loss_grad": np.ones(1, np.float32)}
    np.testing.assert_array_equal(_run(rewritten, feeds)[0], _run(model, feeds)[0])

    again = ReuseSignaturePass(min_bytes=0).call(ir_model)      # nothing left to gain: nothing changed
    assert not again.modified and not again.records


def test_a_graph_whose_reuse_holds_nothing_is_left_alone() -> None:
    x = helper.make_tensor_value_info("x", F, [8, 8])
    y = helper.make_tensor_value_info("y", F, [8, 8])
    seed = helper.make_tensor_value_info("y_grad", F, [8, 8])
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "y_grad"], ["y"])],
                   [x, seed], [y])
    ir_model = ir.serde.deserialize_model(model)
    assert not ReuseSignaturePass(min_bytes=0).call(ir_model).modified


@pytest.mark.parametrize("case", ["matmul_2d", "matmul_batched", "fused_matmul", "softmax_axis1",
                                  "concat", "split", "dropout", "layernorm", "add_broadcast"])
def test_leading_axes_change_no_value(case: str) -> None:
    """Each op kind the pass reshapes computes bit for bit the same with two leading axes of 1 (ORT, defaults)."""
    rng = np.random.default_rng(1)
    a = helper.make_tensor_value_info("a", F, [2, 3, 8, 16])
    b = helper.make_tensor_value_info("b", F, [2, 3, 16, 8])
    w = helper.make_tensor("w", F, [16, 5], rng.standard_normal(80).astype(np.float32))
    bias = helper.make_tensor("bias", F, [16], rng.standard_normal(16).astype(np.float32))
    split = helper.make_tensor("sizes", TensorProto.INT64, [2], [5, 11])
    node, outs, inits = {
        "matmul_2d": (helper.make_node("MatMul", ["a", "w"], ["o"]), [[2, 3, 8, 5]], [w]),
        "matmul_batched": (helper.make_node("MatMul", ["a", "b"], ["o"]), [[2, 3, 8, 8]], []),
        "fused_matmul": (helper.make_node("FusedMatMul", ["a", "a"], ["o"], domain="com.microsoft", transB=1,
                                          alpha=0.5), [[2, 3, 8, 8]], []),
        "softmax_axis1": (helper.make_node("Softmax", ["a"], ["o"], axis=1), [[2, 3, 8, 16]], []),
        "concat": (helper.make_node("Concat", ["a", "a"], ["o"], axis=2), [[2, 3, 16, 16]], []),
        "split": (helper.make_node("Split", ["a", "sizes"], ["o", "o2"], axis=3), [[2, 3, 8, 5], [2, 3, 8, 11]],
                  [split]),
        "dropout": (helper.make_node("Dropout", ["a"], ["o", "o2"]), [[2, 3, 8, 16], [2, 3, 8, 16]], []),
        "layernorm": (helper.make_node("LayerNormalization", ["a", "bias", "bias"], ["o"], axis=3),
                      [[2, 3, 8, 16]], [bias]),
        "add_broadcast": (helper.make_node("Add", ["a", "bias"], ["o"]), [[2, 3, 8, 16]], [bias]),
    }[case]
    node.name = "op"
    types = [TensorProto.BOOL if case == "dropout" and i else F for i in range(len(outs))]
    outputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in zip(node.output, types, outs)]
    model = _model([node], [a, b], outputs, inits)
    feeds = {"a": rng.standard_normal((2, 3, 8, 16)).astype(np.float32),
             "b": rng.standard_normal((2, 3, 16, 8)).astype(np.float32)}
    # Graph outputs are never lifted by the pass; here the op's outputs feed an Identity each, so they are not.
    for o in list(node.output):
        model.graph.node.append(helper.make_node("Identity", [o], [f"{o}_out"]))
    for out in model.graph.output:
        out.name = f"{out.name}_out"
    onnx.checker.check_model(model)
    ir_model = ir.serde.deserialize_model(model)
    op = next(n for n in ir_model.graph if n.name == "op")
    known = {n: tuple(s) for n, s in zip(node.output, outs)}          # what the analysis would infer
    elems = {n: ir.DataType(t) for n, t in zip(node.output, types)}
    assert liftable(op, set(ir_model.graph.outputs), known)
    _lift(op, 2, IrGraphEditor(ir_model.graph), ir_model.graph, {}, known, elems)
    assert all(len(v.shape) == len(s) + 2 for v, s in zip(op.outputs, outs))
    lifted = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(lifted, full_check=True)
    for got, want in zip(_run(lifted, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_views_that_would_break_a_matmul_fusion_are_not_made() -> None:
    """MatMul → scalar Mul fuses into FusedMatMul(alpha) in ORT (different rounding unfused), a Transpose into
    FusedMatMul's transA/transB: none of the three is reshaped."""
    a = helper.make_tensor_value_info("a", F, [2, 8, 16])
    y = helper.make_tensor_value_info("y", F, [2, 8, 8])
    half = helper.make_tensor("half", F, [], [0.5])
    nodes = [helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1], name="transpose"),
             helper.make_node("MatMul", ["a", "t"], ["s"], name="matmul"),
             helper.make_node("Mul", ["s", "half"], ["m"], name="scale"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = ir.serde.deserialize_model(_model(nodes, [a], [y], [half]))
    known = {"t": (2, 16, 8), "s": (2, 8, 8), "m": (2, 8, 8)}
    lift = {n.name: liftable(n, set(model.graph.outputs), known) for n in model.graph}
    assert lift == {"transpose": False, "matmul": False, "scale": False, "relu": False}   # relu: graph output
    # A lossy graph (transform passes keep_fusions=False there) may trade the fusions for memory.
    lossy = {n.name: liftable(n, set(model.graph.outputs), known, keep_fusions=False) for n in model.graph}
    assert lossy == {"transpose": False, "matmul": True, "scale": True, "relu": False}


def test_a_scale_in_front_of_a_matmul_behind_an_identity_keeps_its_fusion() -> None:
    """ORT's MatMulScaleFusion also folds a scalar Mul/Div *in front of* a MatMul into FusedMatMul's alpha, after
    eliminating Identity nodes: the attention backward's dQ = FusedMatMul(Identity(Mul(dS, scale)), K). A view on
    the scaled input (or on the Mul's output) keeps the Mul apart, and the product rounds differently (checked on
    ORT here; GPT-tiny ``lossless`` b16 T256 lost bit-identity that way, NOTES-gptexact.md). A batched product
    lifts its other input alone (ORT broadcasts the scaled one: same values, bit for bit); a product with a 2-D
    weight or both inputs scaled is left alone; a Mul of two tensors (no scale to fold) may still be viewed."""
    x = helper.make_tensor_value_info("x", F, [2, 4, 64, 64])
    k = helper.make_tensor_value_info("k", F, [2, 4, 32, 64])
    v = helper.make_tensor_value_info("v", F, [2, 4, 64, 32])
    outs = [helper.make_tensor_value_info(n, F, [2, 4, 64, 32]) for n in ("y", "z")] + \
        [helper.make_tensor_value_info("u", F, [2, 4, 64, 64])]
    scale = helper.make_tensor("scale", F, [], [0.17677669])
    w = helper.make_tensor("w", F, [64, 32], np.linspace(-1, 1, 64 * 32, dtype=np.float32))
    nodes = [helper.make_node("Mul", ["x", "scale"], ["s"], name="scale"),
             helper.make_node("Identity", ["s"], ["i"], name="identity"),
             helper.make_node("FusedMatMul", ["i", "k"], ["q"], domain="com.microsoft", transB=1, name="dq"),
             helper.make_node("Identity", ["q"], ["y"]),
             helper.make_node("Div", ["x", "scale"], ["d"], name="divide"),
             helper.make_node("MatMul", ["d", "w"], ["p"], name="weight_product"),
             helper.make_node("MatMul", ["s", "i"], ["b"], name="both_scaled"),
             helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("MatMul", ["sq", "v"], ["r"], name="plain"),
             helper.make_node("Add", ["p", "r"], ["a"], name="add"),
             helper.make_node("Identity", ["a"], ["z"]),
             helper.make_node("Identity", ["b"], ["u"])]
    model = _model(nodes, [x, k, v], outs, [scale, w])
    four = {n: (2, 4, 64, 64) for n in ("x", "s", "i", "d", "sq", "b")} | \
        {n: (2, 4, 64, 32) for n in ("q", "p", "r", "a", "v")} | {"k": (2, 4, 32, 64)}
    ir_model = ir.serde.deserialize_model(model)
    graph_outs = set(ir_model.graph.outputs)
    lift = {n.name: liftable(n, graph_outs, four) for n in ir_model.graph if n.name}
    assert lift == {"scale": False, "identity": False, "dq": True, "divide": False, "weight_product": False,
                    "both_scaled": False, "square": True, "plain": True, "add": True}
    lossy = {n.name: liftable(n, graph_outs, four, keep_fusions=False) for n in ir_model.graph if n.name}
    assert lossy["scale"] and lossy["divide"] and lossy["weight_product"] and lossy["both_scaled"]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 4, 64, 64)).astype(np.float32),
             "k": rng.standard_normal((2, 4, 32, 64)).astype(np.float32),
             "v": rng.standard_normal((2, 4, 64, 32)).astype(np.float32)}
    elems = {n: ir.DataType.FLOAT for n in ("i", "k", "q")}
    want = _run(model, feeds)

    def lifted(keep_fusions: bool) -> list[np.ndarray]:
        m = ir.serde.deserialize_model(model)
        dq = next(n for n in m.graph if n.name == "dq")
        _lift(dq, 2, IrGraphEditor(m.graph), m.graph, {}, four, elems, keep_fusions)
        views = [n.op_type for n in m.graph if n.op_type == "Unsqueeze"]
        assert len(views) == (1 if keep_fusions else 2)          # K alone, or both inputs
        return _run(ir.serde.serialize_model(m), feeds)

    for got, expected in zip(lifted(True), want):                # scale still folded: bit for bit
        np.testing.assert_array_equal(got, expected)
    # Why: a view on the scaled input makes ORT run the scale and the product apart; the product's bits change.
    unfused = lifted(False)[0]
    np.testing.assert_allclose(unfused, want[0], rtol=1e-5, atol=1e-5)
    assert not np.array_equal(unfused, want[0])


def test_only_lossy_transforms_let_the_reuse_pass_break_fusions() -> None:
    from onnxcomp.passes.records import PassRecord
    from onnxcomp.transform import _lossy

    exact = [PassRecord("encoded", "dropout_mask", "m", {"encoding": "bitmask"}),
             PassRecord("recomputed", "recompute_attention", "p", {"encoding": "recompute"}),
             PassRecord("chunked", "chunk_attention", "r", {"exact": True})]
    assert not _lossy(exact)
    assert _lossy(exact + [PassRecord("encoded", "dpr", "x", {"encoding": "dpr"})])
    assert _lossy(exact + [PassRecord("chunked", "chunk_attention_forward", "r", {"exact": False})])


def test_bias_gelu_fusion_kept_out_and_values_unchanged() -> None:
    """Gelu(Add(X, b)) with the Add read only by the Gelu: ORT would fuse it into BiasGelu (scratch outside its
    memory pattern); the pass views b as [1, n]; a second run finds nothing; outputs equal bit for bit."""
    x = helper.make_tensor_value_info("x", F, [4, 6, 32])
    y = helper.make_tensor_value_info("y", F, [4, 6, 32])
    z = helper.make_tensor_value_info("z", F, [4, 6, 32])
    bias = helper.make_tensor("bias", F, [32], np.linspace(-2, 2, 32, dtype=np.float32))
    nodes = [helper.make_node("Add", ["x", "bias"], ["pre"], name="add"),
             helper.make_node("Gelu", ["pre"], ["y"], name="gelu", domain="com.microsoft"),
             helper.make_node("Add", ["x", "bias"], ["kept"], name="add_read_twice"),
             helper.make_node("Gelu", ["kept"], ["g2"], name="gelu2", domain="com.microsoft"),
             helper.make_node("Add", ["g2", "kept"], ["z"], name="sum")]
    model = _model(nodes, [x], [y, z], [bias])
    ir_model = ir.serde.deserialize_model(model)
    assert [a.name for a, _ in fusable_bias_adds(ir_model.graph)] == ["add"]   # "kept" has two readers
    outcome = ArenaScratchPass().call(ir_model)
    assert outcome.modified and [r.subject for r in outcome.records] == ["add"]
    assert not fusable_bias_adds(ir_model.graph) and not ArenaScratchPass().call(ir_model).modified
    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten)
    feeds = {"x": np.random.default_rng(2).standard_normal((4, 6, 32)).astype(np.float32) * 3}
    for got, want in zip(_run(rewritten, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def _stretches_graph() -> onnx.ModelProto:
    """Six residual steps of one shape, a Transpose read by a Relu (a plain copy) and one read by a MatMul (ORT
    folds it into the product), then a "backward" of the same shape seeded by ``loss_grad``."""
    x = helper.make_tensor_value_info("x", F, [64, 256])
    seed = helper.make_tensor_value_info("loss_grad", F, [1])
    y = helper.make_tensor_value_info("y", F, [64, 256])
    w = helper.make_tensor("w", F, [256, 256], np.linspace(-1, 1, 256 * 256, dtype=np.float32))
    nodes, h = [], "x"
    for i in range(6):
        nodes += [helper.make_node("Tanh", [h], [f"u{i}"], name=f"tanh{i}"),
                  helper.make_node("Mul", [f"u{i}", f"u{i}"], [f"v{i}"], name=f"square{i}"),
                  helper.make_node("Add", [f"v{i}", h], [f"h{i}"], name=f"add{i}")]
        h = f"h{i}"
    nodes += [helper.make_node("Transpose", [h], ["tt"], perm=[1, 0], name="t_copy"),
              helper.make_node("Relu", ["tt"], ["rt"], name="relu_t"),
              helper.make_node("Transpose", ["rt"], ["back"], perm=[1, 0], name="t_folded"),
              helper.make_node("MatMul", ["back", "w"], ["p"], name="product"),
              helper.make_node("ReduceSum", ["p"], ["s"], name="sum", keepdims=1),
              helper.make_node("Mul", ["s", "loss_grad"], ["ds"], name="seeded")]
    g = "ds"
    for i in reversed(range(6)):
        nodes += [helper.make_node("Mul", [f"u{i}", g], [f"g{i}"], name=f"grad{i}")]
        g = f"g{i}"
    nodes += [helper.make_node("Sigmoid", [g], ["y"], name="out")]
    return _model(nodes, [x, seed], [y], [w])


def test_segment_plan_gives_each_stretch_its_own_shapes_and_changes_no_value() -> None:
    model = _stretches_graph()
    ir_model = ir.serde.deserialize_model(model)
    known = {"h5": (64, 256), "tt": (256, 64), "rt": (256, 64), "back": (64, 256)}
    outs = set(ir_model.graph.outputs)
    by_name = {n.name: n for n in ir_model.graph}
    # Transposes: only in the segment plan, and only one no product reads (ORT folds that one into the GEMM).
    assert not liftable(by_name["t_copy"], outs, known, keep_fusions=False)
    assert liftable(by_name["t_copy"], outs, known, keep_fusions=False, transposes=True)
    assert not liftable(by_name["t_folded"], outs, known, keep_fusions=False, transposes=True)

    p = ReuseSignaturePass(min_bytes=0, keep_fusions=False, segments=4)
    chosen, before, after, _, _ = p.plan_segments(ir_model)
    levels = dict(chosen)
    assert "t_copy" in levels and "t_folded" not in levels and "out" not in levels   # out: a graph output
    assert set(levels.values()) <= set(range(1, 5)) and len(set(levels.values())) > 1
    position = [n.name for n in ir_model.graph]
    ks = [levels[n] for n in position if n in levels]
    assert ks == sorted(ks)                       # a chain: ORT's DEFAULT order is the node list's
    assert after <= before

    # The pass applies whichever plan replays lower (ties: the greedy one, fewer views).
    greedy = ReuseSignaturePass(min_bytes=0, keep_fusions=False, segments=0).plan(ir_model)
    expected = "segments" if after < (greedy[2] if greedy[0] else greedy[1]) else "greedy"
    assert {r["plan"] for r in p.call(ir.serde.deserialize_model(model)).records} == {expected}

    # The segment plan applied (the greedy one emptied): replayed as planned, same values on ORT.
    p.plan = lambda m, ctx=None: ([], before, before, {}, {})   # noqa: ARG005
    outcome = p.call(ir_model)
    assert outcome.modified and {r["plan"] for r in outcome.records} == {"segments"}
    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten, full_check=True)
    assert _replayed(rewritten)[0] == after
    k = levels["t_copy"]
    perm = next(n for n in rewritten.graph.node if n.name == "t_copy").attribute[0].ints
    assert list(perm) == list(range(k)) + [k + 1, k]
    feeds = {"x": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32),
             "loss_grad": np.ones(1, np.float32)}
    np.testing.assert_array_equal(_run(rewritten, feeds)[0], _run(model, feeds)[0])


MS_OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


@pytest.mark.parametrize("case", ["batchnorm_internal", "batchnorm_grad", "relu_grad"])
def test_channel_and_gradient_ops_change_no_value_with_axes_of_1(case: str) -> None:
    """CNN ops the pass reshapes (trailing axes of 1 on BatchNorm's data tensors, leading ones on ReluGrad)
    compute bit for bit the same on ORT (training build, defaults); the per-channel outputs keep their shapes."""
    rng = np.random.default_rng(2)
    shape, c = [4, 3, 5, 7], 3
    x = helper.make_tensor_value_info("x", F, shape)
    dy = helper.make_tensor_value_info("dy", F, shape)
    chans = {n: helper.make_tensor(n, F, [c], v) for n, v in (
        ("scale", rng.uniform(0.5, 2, c)), ("bias", rng.standard_normal(c)), ("mean", rng.standard_normal(c)),
        ("var", rng.uniform(0.5, 2, c)))}
    if case == "batchnorm_internal":
        node = helper.make_node("BatchNormInternal", ["x", "scale", "bias", "mean", "var"],
                                ["o", "rm", "rv", "sm", "si"], domain="com.microsoft", momentum=0.9, epsilon=1e-5)
        outs = [shape, [c], [c], [c], [c]]
    elif case == "batchnorm_grad":
        node = helper.make_node("BatchNormalizationGrad", ["dy", "x", "scale", "mean", "var"], ["o", "ds", "db"],
                                domain="com.microsoft", epsilon=1e-5)
        outs = [shape, [c], [c]]
    else:
        node = helper.make_node("ReluGrad", ["dy", "x"], ["o"], domain="com.microsoft")
        outs = [shape]
    node.name = "op"
    nodes = [node] + [helper.make_node("Identity", [o], [f"{o}_out"]) for o in node.output]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [x, dy], [helper.make_tensor_value_info(f"{o}_out", F, s) for o, s in zip(node.output, outs)],
        list(chans.values())), opset_imports=MS_OPSETS)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "dy": rng.standard_normal(shape).astype(np.float32)}
    feeds["x"][0, 0, 0, :3] = [0.0, -0.0, np.nan]
    ir_model = ir.serde.deserialize_model(model)
    op = next(n for n in ir_model.graph if n.name == "op")
    known = {n: tuple(s) for n, s in zip(node.output, outs)} | {"x": tuple(shape), "dy": tuple(shape)}
    elems = {n: ir.DataType.FLOAT for n in known}
    assert liftable(op, set(ir_model.graph.outputs), known)
    _lift(op, 2, IrGraphEditor(ir_model.graph), ir_model.graph, {}, known, elems)
    trailing = case != "relu_grad"
    assert list(op.outputs[0].shape) == (shape + [1, 1] if trailing else [1, 1] + shape)
    assert [o.name for o in op.outputs[1:]] == list(node.output[1:])     # per-channel outputs: untouched
    lifted = ir.serde.serialize_model(ir_model)
    for got, want in zip(_run(lifted, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def _conv_stages() -> onnx.ModelProto:
    """Two Conv → Relu stages (the Conv outputs share one buffer, the Relu outputs another), a large transient
    made from a reduction of the last stage (the peak; the stages are dead there), then a "backward" of the same shape: a Mul and two Convs reading the ``loss_grad`` seed. ORT's
    reuse plan hands both forward buffers to the backward tensors and holds them, dead, across the peak; no
    side of the shape is liftable as a whole (Conv outputs on both)."""
    rng = np.random.default_rng(3)
    s = [4, 8, 16, 16]
    x = helper.make_tensor_value_info("x", F, s)
    seed = helper.make_tensor_value_info("loss_grad", F, [1])
    y = helper.make_tensor_value_info("y", F, s)
    w = helper.make_tensor("w", F, [8, 8, 3, 3], (rng.standard_normal(8 * 8 * 9) * 0.2).astype(np.float32))
    reps = helper.make_tensor("reps", TensorProto.INT64, [4], [1, 1, 64, 64])
    conv = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1", **conv),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w"], ["c2"], name="conv2", **conv),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("ReduceMax", ["r2"], ["m"], name="max", axes=[2, 3], keepdims=1),
             helper.make_node("Tile", ["m", "reps"], ["big"], name="tile"),
             helper.make_node("ReduceSum", ["big"], ["sum"], name="sum", keepdims=0),
             helper.make_node("Mul", ["sum", "loss_grad"], ["ds"], name="seeded"),
             helper.make_node("Mul", ["x", "ds"], ["g0"], name="scale"),
             helper.make_node("Conv", ["g0", "w"], ["g1"], name="conv_b1", **conv),
             helper.make_node("Conv", ["g1", "w"], ["g2"], name="conv_b2", **conv),
             helper.make_node("Sigmoid", ["g2"], ["y"], name="out")]
    return _model(nodes, [x, seed], [y], [w, reps])


def test_the_liftable_part_of_a_side_releases_a_buffer_a_conv_keeps_the_shape_of() -> None:
    model = _conv_stages()
    before, at, plan = _replayed(model)
    s_bytes = 4 * 8 * 16 * 16 * 4
    assert sum(p.size for p in plan if p.dead_at(at)) == 2 * s_bytes       # both stage buffers held dead

    ir_model = ir.serde.deserialize_model(model)
    outcome = ReuseSignaturePass(min_bytes=0).call(ir_model)
    assert outcome.modified
    lifted = {r["node"] for r in outcome.records}
    assert lifted and not lifted & {"conv1", "conv2", "conv_b1", "conv_b2"}
    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten, full_check=True)
    after, at2, plan2 = _replayed(rewritten)
    assert after <= before - s_bytes
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 8, 16, 16)).astype(np.float32),
             "loss_grad": np.ones(1, np.float32)}
    np.testing.assert_array_equal(_run(rewritten, feeds)[0], _run(model, feeds)[0])


def test_exact_graphs_never_get_the_segment_plan() -> None:
    ir_model = ir.serde.deserialize_model(_stretches_graph())
    outcome = ReuseSignaturePass(min_bytes=0, segments=4).call(ir_model)   # keep_fusions: an exact graph
    assert all(r["plan"] == "greedy" for r in outcome.records)
    assert not any(n.op_type == "Transpose" and n.name == "t_copy" and len(n.attributes["perm"].value) > 2
                   for n in ir_model.graph)


def test_a_codec_decoder_takes_a_declared_shape_of_its_own_and_decodes_the_same_values() -> None:
    """A Conv output (no view can reshape it) dies in the forward; the decoder of its sign bits, born after the
    peak, would take its buffer and ORT would hold it across. The pass declares the decoder's output with a
    leading axis of 1 (the PyOp still writes the same bytes; ORT's memory pattern places blocks by size) and
    its reader reads a Reshape view: the replayed peak drops by the buffer and ORT (defaults, PyOps
    registered) gives the same bits."""
    from onnxcomp.custom_ops import contract
    from onnxcomp.runtime import codec_ops
    from onnxcomp.runtime.session import session_options

    rng = np.random.default_rng(4)
    s = [4, 8, 16, 16]
    enc, dec = codec_ops.op_type_names("signbits")
    attr = codec_ops.params_attr({})
    conv = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    w = helper.make_tensor("w", F, [8, 8, 3, 3], (rng.standard_normal(8 * 8 * 9) * 0.2).astype(np.float32))
    reps = helper.make_tensor("reps", TensorProto.INT64, [4], [1, 1, 64, 64])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", **conv),
             helper.make_node(enc, ["c"], ["bits", "shape", "anchor"], domain=contract.DOMAIN, name="encode",
                              params=attr),
             # the forward reader reads c through the encoder's anchor, so the encoder runs in the forward
             helper.make_node("Reshape", ["c", "anchor"], ["c_anchored"], name="anchored"),
             helper.make_node("ReduceMax", ["c_anchored"], ["m"], name="max", axes=[2, 3], keepdims=1),
             helper.make_node("Tile", ["m", "reps"], ["big"], name="tile"),
             helper.make_node("ReduceSum", ["big"], ["sum"], name="sum", keepdims=0),
             helper.make_node("Mul", ["sum", "loss_grad"], ["ds"], name="seeded"),
             helper.make_node("Reshape", ["ds", "minus_one"], ["trigger"], name="trigger"),
             helper.make_node(dec, ["bits", "shape", "trigger"], ["signs"], domain=contract.DOMAIN, name="decode",
                              params=attr),
             helper.make_node("Mul", ["signs", "ds"], ["y"], name="out")]
    minus_one = helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, s), helper.make_tensor_value_info("loss_grad", F, [1])],
        [helper.make_tensor_value_info("y", F, s)], [w, reps, minus_one],
        value_info=[helper.make_tensor_value_info("bits", TensorProto.UINT8, [4 * 8 * 16 * 16 // 8]),
                    helper.make_tensor_value_info("shape", TensorProto.INT64, ["shape_len"]),
                    helper.make_tensor_value_info("anchor", TensorProto.INT64, [4]),
                    helper.make_tensor_value_info("c_anchored", F, s),
                    helper.make_tensor_value_info("trigger", F, [1]),
                    helper.make_tensor_value_info("signs", F, s)])
    model = helper.make_model(graph, opset_imports=OPSETS + [helper.make_opsetid(contract.DOMAIN, 1)])
    before, at, plan = _replayed(model)
    s_bytes = 4 * 8 * 16 * 16 * 4
    assert [[b.name for b in p.values] for p in plan if p.dead_at(at)] == [["c", "signs"]]

    ir_model = ir.serde.deserialize_model(model)
    outcome = ReuseSignaturePass(min_bytes=0).call(ir_model)
    assert [r["node"] for r in outcome.records] == ["decode"]
    rewritten = ir.serde.serialize_model(ir_model)
    decoder = next(n for n in rewritten.graph.node if n.name == "decode")
    declared = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in rewritten.graph.value_info}
    assert declared[decoder.output[0]] == [1, *s]
    after, _, _ = _replayed(rewritten)
    assert after <= before - s_bytes

    feeds = {"x": rng.standard_normal(s).astype(np.float32), "loss_grad": np.ones(1, np.float32)}

    def run(m: onnx.ModelProto) -> np.ndarray:
        so = session_options()      # onnxcomp's PyOps registered; arena, pattern, reuse on (ORT's defaults)
        so.enable_cpu_mem_arena = so.enable_mem_pattern = True
        return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]

    np.testing.assert_array_equal(run(rewritten), run(model))




@pytest.mark.parametrize("case", ["leaky_relu", "leaky_relu_grad", "concat_training", "split_training"])
def test_suite_ops_change_no_value_with_leading_axes(case: str) -> None:
    """LeakyRelu (and its gradient), ConcatTraining and SplitTraining (ORT's training forms of Concat/Split)
    compute bit for bit the same with two leading axes of 1 (ORT training build, defaults); ConcatTraining's
    per-input lengths keep their shape and values."""
    rng = np.random.default_rng(4)
    shape = [4, 6, 5, 7]
    x = helper.make_tensor_value_info("x", F, shape)
    dy = helper.make_tensor_value_info("dy", F, shape)
    inits = []
    if case == "leaky_relu":
        node = helper.make_node("LeakyRelu", ["x"], ["o"], alpha=0.1)
        outs = [shape]
    elif case == "leaky_relu_grad":
        node = helper.make_node("LeakyReluGrad", ["dy", "x"], ["o"], domain="com.microsoft", alpha=0.1)
        outs = [shape]
    elif case == "concat_training":
        node = helper.make_node("ConcatTraining", ["x", "dy"], ["o", "lengths"], domain="com.microsoft", axis=1)
        outs = [[4, 12, 5, 7], [2]]
    else:
        inits = [helper.make_tensor("split", TensorProto.INT64, [2], [2, 4])]
        node = helper.make_node("SplitTraining", ["x", "split"], ["o", "o2"], domain="com.microsoft", axis=1)
        outs = [[4, 2, 5, 7], [4, 4, 5, 7]]
    node.name = "op"
    types = [TensorProto.INT64 if o == "lengths" else F for o in node.output]
    nodes = [node] + [helper.make_node("Identity", [o], [f"{o}_out"]) for o in node.output]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [x, dy], [helper.make_tensor_value_info(f"{o}_out", t, s) for o, t, s in
                              zip(node.output, types, outs)], inits), opset_imports=MS_OPSETS)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "dy": rng.standard_normal(shape).astype(np.float32)}
    feeds["x"][0, 0, 0, :3] = [0.0, -0.0, np.nan]
    ir_model = ir.serde.deserialize_model(model)
    op = next(n for n in ir_model.graph if n.name == "op")
    known = {n: tuple(s) for n, s in zip(node.output, outs)} | {"x": tuple(shape), "dy": tuple(shape)}
    elems = {n: (ir.DataType.INT64 if n in ("lengths", "split") else ir.DataType.FLOAT) for n in [*known, "split"]}
    assert liftable(op, set(ir_model.graph.outputs), known)
    _lift(op, 2, IrGraphEditor(ir_model.graph), ir_model.graph, {}, known, elems)
    assert list(op.outputs[0].shape) == [1, 1] + outs[0]
    if case == "concat_training":
        assert op.outputs[1].name == "lengths" and op.attributes["axis"].value == 3
    lifted = ir.serde.serialize_model(ir_model)
    for got, want in zip(_run(lifted, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_a_recomputed_leaky_relu_no_longer_holds_the_forward_ones_buffer() -> None:
    """leaky_vgg's case in small: a forward LeakyRelu output dies early, a LeakyRelu of the same shape is
    recomputed in the "backward" (after the peak, reading the seed): ORT's reuse plan holds the forward buffer,
    dead, across the peak. The pass lifts a LeakyRelu, the replayed peak drops by the buffer, same bits."""
    x = helper.make_tensor_value_info("x", F, [64, 256])
    seed = helper.make_tensor_value_info("loss_grad", F, [1])
    y = helper.make_tensor_value_info("y", F, [64, 256])
    w = helper.make_tensor("w", F, [256, 1024], np.linspace(-1, 1, 256 * 1024, dtype=np.float32))
    nodes = [helper.make_node("LeakyRelu", ["x"], ["a"], name="act", alpha=0.1),
             helper.make_node("MatMul", ["a", "w"], ["big"], name="up"),
             helper.make_node("Relu", ["big"], ["wide"], name="relu"),
             helper.make_node("ReduceSum", ["wide"], ["s"], name="sum", keepdims=1),
             helper.make_node("Mul", ["s", "loss_grad"], ["ds"], name="seeded"),
             helper.make_node("Add", ["x", "ds"], ["xs"], name="shift"),
             helper.make_node("LeakyRelu", ["xs"], ["late"], name="act_recomputed", alpha=0.1),
             helper.make_node("Mul", ["late", "x"], ["y"], name="out")]
    model = _model(nodes, [x, seed], [y], [w])
    before, at, plan = _replayed(model)
    held = sum(p.size for p in plan if p.dead_at(at))
    assert held >= 64 * 256 * 4
    ir_model = ir.serde.deserialize_model(model)
    outcome = ReuseSignaturePass(min_bytes=0).call(ir_model)
    assert outcome.modified
    assert {r["op"] for r in outcome.records} & {"LeakyRelu"}
    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten, full_check=True)
    after, _, _ = _replayed(rewritten)
    assert after <= before - 64 * 256 * 4
    feeds = {"x": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32),
             "loss_grad": np.ones(1, np.float32)}
    np.testing.assert_array_equal(_run(rewritten, feeds)[0], _run(model, feeds)[0])

def _conv_case(op: str, group: int, stride: int, bias: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One Conv (or ConvGrad) with its weight a graph input, as in a training graph (ORT lays a 2-D convolution
    with a constant weight out as NCHWc, another kernel), followed by Identities (the op's outputs are no graph
    outputs)."""
    rng = np.random.default_rng(3)
    n, c, k, h = 4, 8, 16, 10
    pads = [1, 0, 2, 1]
    w_shape = [k, c // group, 3, 3]
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    x.flat[:3] = [0.0, -0.0, 1e-30]
    feeds = {"x": x, "w": (rng.standard_normal(w_shape) * 0.2).astype(np.float32)}
    attrs = dict(kernel_shape=[3, 3], pads=pads, strides=[stride, stride], dilations=[1, 1], group=group)
    out_h, out_w = (h + pads[0] + pads[2] - 3) // stride + 1, (h + pads[1] + pads[3] - 3) // stride + 1
    ins = [helper.make_tensor_value_info("x", F, [n, c, h, h]), helper.make_tensor_value_info("w", F, w_shape)]
    if op == "Conv":
        inputs, outs, shapes = ["x", "w"], ["o"], {"o": (n, k, out_h, out_w)}
        if bias:
            feeds["b"] = rng.standard_normal(k).astype(np.float32)
            ins.append(helper.make_tensor_value_info("b", F, [k]))
            inputs.append("b")
        node = helper.make_node("Conv", inputs, outs, name="op", **attrs)
    else:
        feeds["dy"] = rng.standard_normal((n, k, out_h, out_w)).astype(np.float32)
        ins.append(helper.make_tensor_value_info("dy", F, [n, k, out_h, out_w]))
        outs, shapes = ["dx", "dw", "db"], {"dx": (n, c, h, h), "dw": tuple(w_shape), "db": (k,)}
        node = helper.make_node("ConvGrad", ["dy", "x", "w"], outs, name="op", domain="com.microsoft",
                                auto_pad="NOTSET", **attrs)
    nodes = [node] + [helper.make_node("Identity", [o], [f"{o}_out"]) for o in outs]
    outputs = [helper.make_tensor_value_info(f"{o}_out", F, list(shapes[o])) for o in outs]
    model = _model(nodes, ins, outputs)
    model.graph.value_info.extend(helper.make_tensor_value_info(o, F, list(s)) for o, s in shapes.items())
    return model, feeds


@pytest.mark.parametrize("group,stride,bias", [(1, 1, True), (2, 2, False), (8, 1, False)])
def test_a_conv_with_a_spatial_axis_in_front_changes_no_value(group: int, stride: int, bias: bool) -> None:
    """A 2-D Conv lifted by a spatial axis of 1 in front of its own ([N, C, 1, H, W], kernel [1, kh, kw]: ORT's 3-D
    Conv) gives its output bit for bit (zeros of both signs and a denormal in X, asymmetric pads, groups, depthwise);
    one axis at most (MLAS convolves up to 3 spatial axes)."""
    model, feeds = _conv_case("Conv", group, stride, bias)
    ir_model = ir.serde.deserialize_model(model)
    conv = next(n for n in ir_model.graph if n.name == "op")
    assert lift_kind(conv) == "spatial" and max_axes(conv) == MAX_CONV_SPATIAL - 2 == 1
    assert liftable(conv, set(ir_model.graph.outputs))
    _lift(conv, 1, IrGraphEditor(ir_model.graph), ir_model.graph, {})
    lifted = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(lifted)
    n, k = feeds["x"].shape[0], feeds["w"].shape[0]
    assert list(conv.outputs[0].shape)[:3] == [n, k, 1] and len(conv.outputs[0].shape) == 5
    attrs = {a.name: list(a.value) for a in conv.attributes.values() if a.name in ("kernel_shape", "pads", "strides")}
    assert attrs["kernel_shape"] == [1, 3, 3] and attrs["strides"] == [1, stride, stride]
    assert attrs["pads"] == [0, 1, 0, 0, 2, 1]
    for got, want in zip(_run(lifted, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("group,stride", [(1, 1), (2, 2), (8, 1)])
def test_conv_grad_takes_a_declared_axis_and_computes_the_same(group: int, stride: int) -> None:
    """ConvGrad's dX only gets a declared trailing axis (ORT plans with it; the 2-D kernel writes X's shape):
    every output bit for bit, grouped and depthwise too, and no attribute or input of the node changes."""
    model, feeds = _conv_case("ConvGrad", group, stride, False)
    ir_model = ir.serde.deserialize_model(model)
    grad = next(n for n in ir_model.graph if n.name == "op")
    attrs = {a.name: a.value for a in grad.attributes.values()}
    inputs = list(grad.inputs)
    assert lift_kind(grad) == "declared-trail" and max_axes(grad) is None
    assert liftable(grad, set(ir_model.graph.outputs), convs=False)      # not a convolution lift
    _lift(grad, 1, IrGraphEditor(ir_model.graph), ir_model.graph, {})
    lifted = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(lifted)
    assert list(grad.outputs[0].shape) == list(feeds["x"].shape) + [1]
    assert list(grad.inputs) == inputs and {a.name: a.value for a in grad.attributes.values()} == attrs
    assert list(grad.outputs[1].shape) == list(feeds["w"].shape)          # dW keeps its shape
    for got, want in zip(_run(lifted, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_max_pool_grad_takes_a_declared_axis_and_scatters_the_same() -> None:
    """MaxPoolGrad makes dX with its declared shape (batch from dY) and scatters by MaxPool's flat indices: with
    a declared trailing axis of 1 it writes the same bytes (ties, NaN-free data with repeated maxima), and readers
    read a Reshape view back."""
    rng = np.random.default_rng(5)
    x = np.round(rng.standard_normal((4, 8, 12, 12)) * 2).astype(np.float32)    # ties: repeated maxima
    dy = rng.standard_normal((4, 8, 6, 6)).astype(np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("MaxPoolGrad", ["dy", "idx"], ["dx"], name="op", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Identity", ["dx"], ["dx_out"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [4, 8, 12, 12]),
                           helper.make_tensor_value_info("dy", F, [4, 8, 6, 6])],
                   [helper.make_tensor_value_info("dx_out", F, [4, 8, 12, 12])])
    # ORT's MaxPoolGrad kernel reads its output shape from the graph's declaration (it has no shape inference)
    model.graph.value_info.append(helper.make_tensor_value_info("dx", F, [4, 8, 12, 12]))
    ir_model = ir.serde.deserialize_model(model)
    grad = next(n for n in ir_model.graph if n.name == "op")
    assert lift_kind(grad) == "declared-trail" and liftable(grad, set(ir_model.graph.outputs), convs=False)
    _lift(grad, 2, IrGraphEditor(ir_model.graph), ir_model.graph, {})
    lifted = ir.serde.serialize_model(ir_model)
    assert list(grad.outputs[0].shape) == [4, 8, 12, 12, 1, 1]
    feeds = {"x": x, "dy": dy}
    want = _run(model, feeds)[0]
    np.testing.assert_array_equal(_run(lifted, feeds)[0], want)
    assert np.count_nonzero(want) > 0


def test_convs_ort_would_compute_another_way_are_not_lifted() -> None:
    """ORT fuses Conv + Add (the Add its only reader) into one kernel that accumulates into the output, and runs
    a 2-D Conv with a constant weight as NCHWc: a view would unfuse the one and not lay out the other, so such
    Convs are left alone; a lone Relu reader is no obstacle (see CONV_OPS)."""
    x = helper.make_tensor_value_info("x", F, [2, 4, 6, 6])
    w = helper.make_tensor_value_info("w", F, [4, 4, 3, 3])
    y = helper.make_tensor_value_info("y", F, [2, 4, 6, 6])
    const_w = helper.make_tensor("w", F, [4, 4, 3, 3], np.zeros(144, np.float32))
    for reader, constant, expected in (("Add", False, False), ("Relu", False, True), ("Relu", True, False)):
        second = ["c", "x"] if reader == "Add" else ["c"]
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                 helper.make_node(reader, second, ["y"], name="reader")]
        model = ir.serde.deserialize_model(_model(nodes, [x] if constant else [x, w], [y],
                                                  [const_w] if constant else []))
        conv = next(n for n in model.graph if n.name == "conv")
        assert liftable(conv, set(model.graph.outputs), {"c": (2, 4, 6, 6)}) is expected


def _conv_forward_backward() -> onnx.ModelProto:
    """A forward Conv whose output ``c1`` (freed after its Relu) has the shape of the backward ConvGrad's ``dr``
    born after the step's peak (the wide ``c2`` and its gradient): ORT's reuse plan hands ``c1``'s buffer to
    ``dr`` and holds it, dead, across the peak. Weights are graph inputs, as in a training graph."""
    ins = [helper.make_tensor_value_info(n, F, s) for n, s in (("x", [8, 16, 16, 16]), ("loss_grad", [1]),
                                                                 ("w1", [16, 16, 3, 3]), ("w2", [64, 16, 3, 3]))]
    outs = [helper.make_tensor_value_info(n, F, s) for n, s in (("y", [8, 16, 16, 16]), ("dw2", [64, 16, 3, 3]))]
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", **conv),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2", **conv),
             helper.make_node("ReduceSum", ["c2"], ["s"], name="sum", keepdims=0),
             helper.make_node("Mul", ["s", "loss_grad"], ["ds"], name="seeded"),
             helper.make_node("Mul", ["c2", "ds"], ["dc2"], name="dc2"),
             helper.make_node("ConvGrad", ["dc2", "r", "w2"], ["dr", "dw2", ""], name="conv2_grad",
                              domain="com.microsoft", strides=[1, 1], dilations=[1, 1], group=1, auto_pad="NOTSET",
                              **conv),
             helper.make_node("Sigmoid", ["dr"], ["y"], name="out")]
    return _model(nodes, ins, outs)


@pytest.mark.parametrize("lift_convs", [True, False])
def test_the_pass_releases_a_forward_conv_buffer(lift_convs: bool) -> None:
    """The forward Conv's buffer, held for the backward ConvGrad's dX across the peak, is released: by the Conv
    taking a spatial axis (the forward side is tried first), or, with convolution lifts off, by ConvGrad's dX
    taking a declared axis (its 2-D kernel unchanged). Replay down by the buffer, ORT's values bit for bit."""
    model = _conv_forward_backward()
    before, at, plan = _replayed(model)
    held = [[b.name for b in p.values] for p in plan if p.dead_at(at) and p.size > 0]
    assert held == [["c1", "dr"]]
    ir_model = ir.serde.deserialize_model(model)
    outcome = ReuseSignaturePass(min_bytes=0, lift_convs=lift_convs).call(ir_model)
    assert outcome.modified
    ops = {r["op"] for r in outcome.records}
    assert ("Conv" in ops and "ConvGrad" not in ops) if lift_convs else ops == {"ConvGrad"}
    grad = next(n for n in ir_model.graph if n.name == "conv2_grad")
    assert (grad.outputs[0].shape is None) if lift_convs else list(grad.outputs[0].shape) == [8, 16, 16, 16, 1]
    rewritten = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(rewritten)
    after, at2, plan2 = _replayed(rewritten)
    assert before - after == 8 * 16 * 16 * 16 * 4 and not [p for p in plan2 if p.dead_at(at2) and p.size > 0]
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((8, 16, 16, 16)).astype(np.float32), "loss_grad": np.ones(1, np.float32),
             "w1": (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32),
             "w2": (rng.standard_normal((64, 16, 3, 3)) * 0.1).astype(np.float32)}
    for got, want in zip(_run(rewritten, feeds), _run(model, feeds)):
        np.testing.assert_array_equal(got, want)
