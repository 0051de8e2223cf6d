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
    assert {s.reason.split(" ")[0] for s in result.skipped} == {"X"} and len(result.skipped) == 2
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
    rewritten = [r for r in result.all_records if r.pass_name == "mask_grad"]
    assert rewritten
    model = onnx.load(str(out))
    # every ReLU of the small CNN is held as sign bits: no ReluGrad is left, each became the recorded Mul
    assert not [n for n in model.graph.node if n.op_type == "ReluGrad"]
    muls = {n.name for n in model.graph.node if n.op_type == "Mul"}
    assert {r["node"] for r in rewritten} <= muls
