"""ReluGrad on a decoded sign mask as Mul (passes/mask_grad.py): on a hand-written backward, only the ReluGrad
that reads Cast(bool, float) is rewritten; ORT's outputs keep ReluGrad's bits wherever the mask is set (NaN,
±inf, -0 included) and its values (a zero, either sign) where it is not, for every finite dY. Only the lossy
policies run the pass."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxcomp.passes import POLICIES, MaskGradPass
from onnxcomp.passes.encode_stash import BITS_LUT_FLOAT, NATIVE_BITS_LUT, NATIVE_BITS_LUT_FLOAT
from onnxcomp.passes.mask_grad import FOLD_PATTERN, PATTERN

N = 64

_GRAPH = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
bwd (float[{N}] y_grad, bool[{N}] m, float[{N}] x, int32[{N}] k) => (float[{N}] a, float[{N}] b, float[{N}] c) {{
    mf = Cast <to = 1> (m)
    a = com.microsoft.ReluGrad (y_grad, mf)
    b = com.microsoft.ReluGrad (y_grad, x)
    kf = Cast <to = 1> (k)
    c = com.microsoft.ReluGrad (y_grad, kf)
}}
"""


def _model() -> onnx.ModelProto:
    return onnx.parser.parse_model(_GRAPH)


def _feeds() -> dict[str, np.ndarray]:
    special = np.array([0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38], np.float32)
    rng = np.random.default_rng(0)
    dy = rng.standard_normal(N).astype(np.float32)
    dy[:2 * len(special)] = np.repeat(special, 2)          # each special value once with the mask set, once not
    m = np.resize(np.array([True, False]), N)
    m[2 * len(special):] = rng.standard_normal(N - 2 * len(special)) > 0
    return {"y_grad": dy, "m": m, "x": rng.standard_normal(N).astype(np.float32),
            "k": rng.integers(-2, 3, N).astype(np.int32)}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["a", "b", "c"], feeds)


def test_only_the_bool_mask_reluGrad_becomes_mul() -> None:
    result = MaskGradPass().run(_model())
    ops = {n.output[0]: (n.op_type, n.domain) for n in result.model.graph.node}
    assert ops["a"] == ("Mul", "")
    assert ops["b"] == ("ReluGrad", "com.microsoft")     # a float stash: values are not 0/1
    assert ops["c"] == ("ReluGrad", "com.microsoft")     # a Cast of int32: not 0/1 either
    assert [r["node"] for r in result.records] == [n.name for n in result.model.graph.node if n.output[0] == "a"]
    assert all(r["exact"] is False for r in result.records)
    relugrad_skips = [s for s in result.skipped if s.pattern == PATTERN]
    assert {s.reason.split(" ")[0] for s in relugrad_skips} == {"X"} and len(relugrad_skips) == 2
    assert not [s for s in result.skipped if s.pattern == FOLD_PATTERN]         # the fold is opt-in
    # the mask is a graph input, not a native bit decode: its Cast stays (the fold's own test is below)
    folding = MaskGradPass(fold_decode=True).run(_model())
    assert [s.reason for s in folding.skipped if s.pattern == FOLD_PATTERN] == ["the mask is not a native bit decode"]
    again = MaskGradPass().run(result.model)
    assert not again.modified and not again.records       # nothing left to rewrite: honest `modified`


def test_same_values_as_relugrad_and_the_same_bits_where_the_mask_is_set() -> None:
    feeds = _feeds()
    before = _run(_model(), feeds)
    after = _run(MaskGradPass().run(_model()).model, feeds)
    dy, m = feeds["y_grad"], feeds["m"]
    a0, a1 = before[0], after[0]
    # where the mask is set: ReluGrad's bits exactly, NaN / ±inf / -0 / subnormals included
    assert np.array_equal(a0[m].view(np.uint32), a1[m].view(np.uint32))
    # where it is not and dY is finite: a zero (ReluGrad +0, the product ±0): equal values
    masked_finite = ~m & np.isfinite(dy)
    assert np.all(a0[masked_finite] == 0) and np.all(a1[masked_finite] == 0)
    assert np.any(np.signbit(a1[masked_finite]))          # the documented difference: a zero's sign
    # a non-finite gradient at a masked position: NaN instead of +0 (documented; the step is lost anyway)
    assert np.all(np.isnan(a1[~m & ~np.isfinite(dy)])) and np.all(a0[~m & ~np.isfinite(dy)] == 0)
    # the ReluGrads left alone compute what they did
    for k in (1, 2):
        assert np.array_equal(before[k].view(np.uint32), after[k].view(np.uint32))


def test_only_lossy_policies_run_it() -> None:
    with_pass = {name for name, p in POLICIES.items() if any(s.make is MaskGradPass for s in p.steps)}
    assert {"dpr-fp16", "dpr-fp8", "comet", "q8", "zfp-8", "rows+comet"} <= with_pass
    exact = {"lossless", "lossless-encode", "recompute", "rows", "rows+lossless", "reorder", "chunks",
             "encode+chunks"}
    assert not with_pass & exact
    for name in with_pass:      # last: the chunked regions' finder looks for ReluGrad
        assert POLICIES[name].steps[-1].make is MaskGradPass


@pytest.mark.parametrize("policy", ["dpr-fp16", "comet"])
def test_lossy_policy_graph_has_no_relugrad_on_a_mask(small_artifacts, tmp_path, policy: str) -> None:  # noqa: ANN001
    from onnxcomp.transform import transform

    out = tmp_path / "m.onnx"
    result = transform(small_artifacts, out, policy, min_bytes=0)
    rewritten = [r for r in result.all_records if r.pass_name == "mask_grad" and r["pattern"] == PATTERN]
    assert rewritten
    model = onnx.load(str(out))
    # every ReLU of the small CNN is held as sign bits: no ReluGrad is left, each became the recorded Mul
    assert not [n for n in model.graph.node if n.op_type == "ReluGrad"]
    muls = {n.name for n in model.graph.node if n.op_type == "Mul"}
    assert {r["node"] for r in rewritten} <= muls


# -- folding the mask's Cast into a native bit decode ------------------------------------------------------

M = 256          # elements per mask (a multiple of 8: native bits)


def _decode_graph() -> onnx.ModelProto:
    """Two native bit decodes (encode_stash._encode_native_bits' form) of payloads p / q, each cast to float
    for a ReluGrad; q's bool mask is also sliced (as a chunked region does), so only p's Cast may fold."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    lut = nh.from_array(BITS_LUT_FLOAT.astype(np.bool_), NATIVE_BITS_LUT)
    inits = [lut, nh.from_array(np.array([M // 8], np.int64), "rows"), nh.from_array(np.array([M], np.int64), "shape"),
             nh.from_array(np.array([0], np.int64), "s0"), nh.from_array(np.array([M // 2], np.int64), "s1")]
    nodes = []
    for p in ("p", "q"):
        nodes += [h.make_node("Reshape", [p, "rows"], [f"{p}_v"], name=f"{p}_view"),
                  h.make_node("Cast", [f"{p}_v"], [f"{p}_i"], to=T.INT32, name=f"{p}_index"),
                  h.make_node("Gather", [NATIVE_BITS_LUT, f"{p}_i"], [f"{p}_g"], axis=0, name=f"{p}_unpack"),
                  h.make_node("Reshape", [f"{p}_g", "shape"], [f"{p}_m"], name=f"{p}_decode_bits"),
                  h.make_node("Cast", [f"{p}_m"], [f"{p}_mf"], to=T.FLOAT, name=f"{p}_as_float"),
                  h.make_node("ReluGrad", ["y_grad", f"{p}_mf"], [f"{p}_dx"], domain="com.microsoft", name=f"{p}_rg")]
    nodes += [h.make_node("Slice", ["q_m", "s0", "s1"], ["q_half"], name="q_chunk")]
    outs = [h.make_tensor_value_info(n, t, s) for n, t, s in
            [("p_dx", T.FLOAT, [M]), ("q_dx", T.FLOAT, [M]), ("q_half", T.BOOL, [M // 2])]]
    g = h.make_graph(nodes, "bwd", [h.make_tensor_value_info("p", T.UINT8, [M // 8, 1]),
                                    h.make_tensor_value_info("q", T.UINT8, [M // 8, 1]),
                                    h.make_tensor_value_info("y_grad", T.FLOAT, [M])], outs, initializer=inits,
                     value_info=[h.make_tensor_value_info(f"{p}_{k}", t, s) for p in "pq" for k, t, s in
                                 [("i", T.INT32, [M // 8]), ("g", T.BOOL, [M // 8, 8]), ("m", T.BOOL, [M]),
                                  ("mf", T.FLOAT, [M])]])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])


def _decode_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal(M).astype(np.float32)
    dy[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1.5, -1.5, 0.0]
    return {"p": rng.integers(0, 256, (M // 8, 1), dtype=np.uint8),
            "q": rng.integers(0, 256, (M // 8, 1), dtype=np.uint8), "y_grad": dy}


def test_a_native_decode_read_only_by_the_cast_gathers_floats() -> None:
    result = MaskGradPass(fold_decode=True).run(_decode_graph())
    g = result.model.graph
    made_by = {o: n for n in g.node for o in n.output}
    # p: the Cast is gone, the Mul reads the decode, which gathers from the float table; its nodes sit where
    # the Cast was (right before the Mul)
    p_mul = made_by["p_dx"]
    assert p_mul.op_type == "Mul" and p_mul.input[1] == "p_m" and "p_mf" not in made_by
    assert made_by["p_g"].input[0] == NATIVE_BITS_LUT_FLOAT
    names = [n.name for n in g.node]
    assert names.index("p_rg") - names.index("p_decode_bits") == 1
    assert names.index("p_rg") - names.index("p_unpack") == 2
    # q: the bool mask is also sliced: decode and Cast kept
    assert made_by["q_dx"].input[1] == "q_mf" and made_by["q_mf"].op_type == "Cast"
    assert made_by["q_g"].input[0] == NATIVE_BITS_LUT
    assert {i.name for i in g.initializer} >= {NATIVE_BITS_LUT, NATIVE_BITS_LUT_FLOAT}
    folds = [r for r in result.records if r["pattern"] == FOLD_PATTERN]
    assert [r["mask"] for r in folds] == ["p_m"] and folds[0]["exact"] is True
    assert {r["mask"] for r in result.records if r["pattern"] == PATTERN} == {"p_m", "q_mf"}
    assert [s.reason for s in result.skipped if s.pattern == FOLD_PATTERN] == [
        "the bool mask has other readers (e.g. a chunked region's Slices): kept one byte per element"]
    onnx.checker.check_model(result.model)
    again = MaskGradPass(fold_decode=True).run(result.model)
    assert not again.modified and not again.records


def test_folding_keeps_every_bit() -> None:
    import onnxruntime as ort

    unfolded = MaskGradPass(fold_decode=False).run(_decode_graph()).model
    folded = MaskGradPass(fold_decode=True).run(_decode_graph()).model
    assert sum(n.op_type == "Cast" for n in folded.graph.node) < sum(n.op_type == "Cast" for n in unfolded.graph.node)
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (unfolded, folded)]
    for seed in range(3):
        feeds = _decode_feeds(seed)
        a, b = (s.run(["p_dx", "q_dx"], feeds) for s in run)
        for x, y in zip(a, b):
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32))
        # and the folded mask is the decode: dY where the bit is set (NaN included), a zero elsewhere
        bits = np.unpackbits(feeds["p"].ravel(), bitorder="little").astype(bool)
        finite = np.isfinite(feeds["y_grad"])
        assert np.array_equal(b[0][bits].view(np.uint32), feeds["y_grad"][bits].view(np.uint32))
        assert np.all(b[0][~bits & finite] == 0)


def test_the_bool_table_goes_when_nothing_reads_it() -> None:
    model = _decode_graph()
    # without q's Slice both masks fold and the bool table is dropped
    model.graph.node.remove([n for n in model.graph.node if n.name == "q_chunk"][0])
    model.graph.output.remove([o for o in model.graph.output if o.name == "q_half"][0])
    result = MaskGradPass(fold_decode=True).run(model)
    assert {i.name for i in result.model.graph.initializer} & {NATIVE_BITS_LUT, NATIVE_BITS_LUT_FLOAT} == \
        {NATIVE_BITS_LUT_FLOAT}
    assert not [n for n in result.model.graph.node if n.op_type == "Cast" and n.output[0].endswith("_mf")]
