"""Lossy policies end to end: graph rewrites, run-time error bounds, COMET's controller, policy config."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.errors import OnnxcompError
from onnxcomp.passes.encode_stash import NATIVE_BITS_LUT
from onnxcomp.runtime import bounds
from onnxcomp.runtime.controller import AdaptiveBoundController, BoundedLayer, bounded_layers, combined_elements
from onnxcomp.runtime.train import train
from onnxcomp.transform import load_policy_config, transform


def _codecs(result) -> dict[str, set[str]]:  # noqa: ANN001
    out: dict[str, set[str]] = {}
    for r in result.records:
        out.setdefault(r["codec"], set()).add(r["pattern"])
    return out


@pytest.mark.parametrize("policy", ["dpr-fp16", "dpr-bf16", "dpr-fp10", "dpr-fp8"])
def test_dpr_policy_reduces_only_the_backward_copy(small_artifacts: Path, tmp_path: Path, policy: str) -> None:
    out = tmp_path / policy
    result = transform(small_artifacts, out, policy, min_bytes=0)
    codecs = _codecs(result)
    fmt = policy.split("-")[1]
    assert f"dpr_{fmt}" in codecs and "maxpool_index" in codecs
    # ReluGrad keeps exact signs: no DPR copy is ever read by a ReluGrad.
    model = onnx.load(str(out / "training_model.onnx"))
    decoded_by = {n.output[0]: n.op_type for n in model.graph.node if n.op_type.startswith("OnnxcompDecode_")}
    # (sign masks held natively, the default: Reshape(Gather(the bits table, bytes)); encode_stash.py)
    gathers = {n.output[0] for n in model.graph.node if n.op_type == "Gather" and n.input[0] == NATIVE_BITS_LUT}
    decoded_by.update({n.output[0]: "OnnxcompDecode_bitmask" for n in model.graph.node
                       if n.op_type == "Reshape" and n.input[0] in gathers})
    cast_of = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast"}
    # (the first layer's backward runs in batch chunks: its ReluGrads read a Cast of a Slice of the mask)
    slice_of = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Slice"}
    # (the policy's last pass turns ReluGrad on a mask into Mul(dY, mask): passes/mask_grad.py)
    masked = {r["node"] for r in result.all_records if r.pass_name == "mask_grad"}
    relu_grads = [n for n in model.graph.node if n.op_type == "ReluGrad" or n.name in masked]
    assert relu_grads and masked
    for n in relu_grads:   # every ReluGrad reads a float copy of a sign-bit mask, never a lossy copy
        mask = cast_of[n.input[1]]
        assert decoded_by[slice_of.get(mask, mask)] == "OnnxcompDecode_bitmask"
    base = train(small_artifacts, steps=4, data="synthetic", seed=1, progress=False)
    lossy = train(out, steps=4, data="synthetic", seed=1, progress=False)
    # The forward pass is untouched (FP32), so the first loss is bit-identical; later ones drift a little.
    assert lossy.losses[0] == base.losses[0]
    assert all(math.isfinite(v) for v in lossy.losses)
    assert np.allclose(lossy.losses, base.losses, rtol=0.05)


def test_comet_policy_trains_and_adapts_bounds(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "comet"
    result = transform(small_artifacts, out, "comet", min_bytes=0, eb=1e-4)
    codecs = _codecs(result)
    assert "sz" in codecs and "bitmask" in codecs
    layers = bounded_layers(out / "training_model.onnx")
    assert layers and all(layer.eb0 == 1e-4 and layer.adaptive for layer in layers)
    model = onnx.load(str(out / "training_model.onnx"))
    assert any(n.op_type == "ReduceL2" for n in model.graph.node)  # decoders see the scale of dY
    base = train(small_artifacts, steps=5, data="synthetic", seed=2, progress=False)
    res = train(out, steps=5, data="synthetic", seed=2, progress=False, bound_control={"window": 2})
    assert res.losses[0] == base.losses[0]
    assert np.allclose(res.losses, base.losses, rtol=0.05)
    assert res.bounds is not None and res.bounds["updates"] >= len(layers)
    moved = [k for k, eb in res.bounds["bounds"].items() if eb != 1e-4]
    assert moved, "the controller must retune bounds at run time"
    # What the error-bounded encoders held per step, for comparing ablations at equal compression.
    payload = res.bounds["payload"]
    sz_raw = sum(r["original_bytes"] for r in result.records if r["codec"] == "sz")
    assert payload["raw_bytes"] == sz_raw
    assert 0 < payload["encoded_bytes"] < sz_raw and payload["ratio"] == sz_raw / payload["encoded_bytes"]


def test_comet_static_keeps_the_graph_bound(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "static"
    transform(small_artifacts, out, "comet", min_bytes=0, eb=3e-3, adaptive=False)
    res = train(out, steps=3, data="synthetic", seed=2, progress=False)
    assert res.bounds is not None and res.bounds["static"] and res.bounds["updates"] == 0
    assert set(res.bounds["bounds"].values()) == {3e-3}
    transform(small_artifacts, tmp_path / "loose", "comet", min_bytes=0, eb=3e-1, adaptive=False)
    loose = train(tmp_path / "loose", steps=3, data="synthetic", seed=2, progress=False)
    assert loose.bounds["payload"]["raw_bytes"] == res.bounds["payload"]["raw_bytes"]
    assert loose.bounds["payload"]["encoded_bytes"] < res.bounds["payload"]["encoded_bytes"]  # looser: smaller


def test_encoder_reads_the_run_time_bound() -> None:
    from onnxcomp.custom_ops import get_codec
    from onnxcomp.runtime import codec_ops

    encode = codec_ops._make_encode(get_codec("sz"))
    decode = codec_ops._make_decode(get_codec("sz"))
    x = np.random.default_rng(0).standard_normal((4, 8, 16, 16)).astype(np.float32)
    params = codec_ops.params_attr({"eb": 1e-4, "key": "t", "weight": "w", "batch": 4, "dy_numel": 100})
    bounds.reset()
    try:
        tight = encode(x, params=params)
        bounds.set_bound("t", 0.5)
        loose = encode(x, params=params)
        assert sum(p.nbytes for p in loose[:-1]) < sum(p.nbytes for p in tight[:-1]) / 4
        for payload, eb in ((tight, 1e-4), (loose, 0.5)):
            y = decode(*payload[:-1], np.float32([1.0]), params=params)
            assert np.abs(y - x).max() <= eb
        # Statistics only while the controller collects.
        assert bounds.stats() == {}
        bounds.set_collecting(True)
        encode(x, params=params)
        decode(*loose[:-1], np.float32([20.0]), params=params)
        s = bounds.stats()["t"]
        assert s.nonzero_ratio == 1.0 and s.numel == x.size and s.dy_rms == pytest.approx(2.0)
    finally:
        bounds.reset()


def test_controller_formula_and_window() -> None:
    layer = BoundedLayer("k", "w", batch=8, eb0=1e-3, adaptive=True)
    ctl = AdaptiveBoundController([layer], window=8)
    layer.grad_scale = 2e-3
    # eb = 0.01·M / (a·L·√(N·R)); conv: N = dY elements / C_out.
    n = combined_elements(8, 8 * 16 * 10 * 10, (16, 4, 3, 3))
    assert n == 800
    eb = ctl.bound_for(layer, 0.5, 0.1, 8 * 16 * 10 * 10, (16, 4, 3, 3))
    assert eb == pytest.approx(0.01 * 2e-3 / (ctl.a * 0.1 * math.sqrt(400)))
    assert combined_elements(8, 8 * 10, (10, 64)) == 8  # fully connected: the batch

    class P:
        def __init__(self, g: np.ndarray) -> None:
            self.grad = g

    layer.grad_scale = None  # the first collection starts the gradient-scale average
    for step, g in ((1, 1e-2), (2, 1e-2)):
        ctl.before_step(step)
        assert bounds.collecting() == (step == 1)
        bounds.record_activation("k", 50, 100, 1e-3)
        bounds.record_gradient("k", 0.1 * math.sqrt(1600), 1600)
        ctl.after_step(step, {"w": P(np.full((16, 4, 3, 3), g, np.float32))})
    # The first update moved the bound by far more than 2x: the window halves.
    assert ctl.window == 4 and ctl.next_collect == 5
    assert bounds.bound("k", 1e-3) == pytest.approx(0.01 * 1e-2 / (ctl.a * 0.1 * math.sqrt(100 * 0.5)))
    bounds.reset()


def test_policy_config_file(small_artifacts: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "policy.toml"
    cfg.write_text('eb = 2e-3\ndpr_format = "bf16"\n[overrides]\n"Conv-output→BatchNormalizationGrad" = "none"\n')
    options = load_policy_config(cfg)
    result = transform(small_artifacts, tmp_path / "out", "comet", min_bytes=0, **options)
    patterns = {r["pattern"] for r in result.records}
    assert not any(p.startswith("Conv-output") for p in patterns)
    assert all(r["params"].get("eb") == 2e-3 for r in result.records if r["codec"] == "sz")
    assert any(s["reason"].startswith("config assigns") for s in result.skipped)

    bad = tmp_path / "bad.toml"
    bad.write_text("eb = 1e-3\nwindow = 3\n")
    with pytest.raises(OnnxcompError, match="unknown key"):
        load_policy_config(bad)
    bad.write_text('[overrides]\n"Relu-output→ConvGrad" = "zip"\n')
    with pytest.raises(OnnxcompError, match="zip"):
        load_policy_config(bad)
    bad.write_text("eb = [")
    with pytest.raises(OnnxcompError, match="TOML"):
        load_policy_config(bad)


def test_comet_dpr_format_is_an_option_dpr_policies_fix_theirs(small_artifacts: Path, tmp_path: Path) -> None:
    from onnxcomp.cli import main

    default = {r["codec"] for r in transform(small_artifacts, tmp_path / "a", "comet", min_bytes=0).records}
    assert "dpr_fp16" in default
    out = tmp_path / "fp10.onnx"
    assert main(["transform", str(small_artifacts), "-o", str(out), "--policy", "comet", "--dpr-format", "fp10",
                 "--min-bytes", "0", "--json"]) == 0
    codecs = {t["codec"] for t in json.loads(out.with_suffix(".plan.json").read_text())["tensors"]}
    assert "dpr_fp10" in codecs and "dpr_fp16" not in codecs
    fixed = {r["codec"] for r in transform(small_artifacts, tmp_path / "b", "dpr-fp8", min_bytes=0).records}
    assert "dpr_fp8" in fixed and "dpr_fp16" not in fixed
    # A dpr-* policy fixes its format: asking for another is an error, not silently ignored.
    with pytest.raises(OnnxcompError, match="'dpr-fp8' does not take option 'dpr_format'"):
        transform(small_artifacts, tmp_path / "c", "dpr-fp8", dpr_format="fp16")
    assert not (tmp_path / "c").exists()


def test_cli_transform_comet_with_flags(small_artifacts: Path, tmp_path: Path) -> None:
    from onnxcomp.cli import main

    out = tmp_path / "cli.onnx"
    rc = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "comet", "--eb", "5e-3",
               "--static-eb", "--min-bytes", "0", "--json"])
    assert rc == 0
    plan = json.loads(out.with_suffix(".plan.json").read_text())
    sz = [t for t in plan["tensors"] if t["codec"] == "sz"]
    assert sz and all(t["params"]["eb"] == 5e-3 and t["params"]["adaptive"] is False for t in sz)


def test_error_injection_matches_the_uniform_error_model() -> None:
    """COMET §4.2 on a real (briefly trained) CNN: the dW error of U[-eb, eb] on X's nonzeros has the σ the
    variance of a sum of uniforms predicts, a·rms(dY)·√(N·R)·eb with a ≤ 1/√3, and is bell-shaped."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("error_injection", Path(__file__).parents[1] / "tools" /
                                                  "error_injection.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    result = tool.run("resnet18", image=32, batch=8, train_steps=2, rel_bounds=[1e-2], seed=0, trials=1)
    s = result["summary"]
    assert s["layers"] == 20
    assert 0.15 < s["a_rms"]["median"] <= 1 / math.sqrt(3) * 1.1
    assert s["a_rms"]["cv"] < s["a_batch"]["cv"]  # rms(dY) and N = products per dW value explain the spread
    assert 0.6 < s["within_1sigma_mean"] < 0.9 and 0.9 < s["within_2sigma_mean"] < 0.99


def test_bad_pass_option_is_a_clear_error(small_artifacts: Path, tmp_path: Path) -> None:
    from onnxcomp.cli import main

    out = tmp_path / "bad.onnx"
    with pytest.raises(OnnxcompError, match="eb must be a finite float > 0"):
        transform(small_artifacts, out, "comet", eb=-1.0)
    assert main(["transform", str(small_artifacts), "-o", str(out), "--policy", "comet", "--eb", "-1"]) != 0
    assert not out.exists()


# -- native fp16 (ONNX Cast + Clip instead of PyOps) ------------------------------------------------------

@pytest.mark.parametrize("order", ["priority", "default"])
def test_native_fp16_matches_the_codec_and_keeps_its_timing(small_artifacts: Path, tmp_path: Path,
                                                            order: str) -> None:
    from onnxcomp.analysis.execution_order import ort_order

    from onnxcomp.runtime.session import RuntimeSettings

    native = transform(small_artifacts, tmp_path / "native", "dpr-fp16", min_bytes=0)
    pyop = transform(small_artifacts, tmp_path / "pyop", "dpr-fp16", min_bytes=0, native=False)
    fp16 = [r for r in native.records if r["codec"] == "dpr_fp16"]
    assert fp16 and all(r["native"] == "fp16" for r in fp16)
    assert [r["tensor"] for r in fp16] == [r["tensor"] for r in pyop.records if r["codec"] == "dpr_fp16"]
    model = onnx.load(str(tmp_path / "native" / "training_model.onnx"))
    assert not any(n.op_type.endswith("_dpr_fp16") for n in model.graph.node)   # no PyOp left for fp16
    # Timing under ORT's order: the encoding Cast runs in forward, the decoding Cast right before its reader.
    g = model.graph
    seq = ort_order(model, order)
    pos = {g.node[i].name: k for k, i in enumerate(seq)}
    loss = next(g.node[i].name for i in seq if g.node[i].op_type.startswith("SoftmaxCrossEntropyLoss")
                and not g.node[i].op_type.endswith("Grad"))
    readers = {x: [g.node[i].name for i in seq if x in g.node[i].input] for n in g.node for x in n.output}
    for r in fp16:
        enc = next(n for n in g.node if n.name == r["encoder"])
        cast = next(n for n in g.node if n.input and n.input[0] == enc.output[0])
        assert pos[cast.name] < pos[loss]
        dec = next(n for n in g.node if n.name == r["decoder"])
        assert pos[dec.name] > pos[loss]
        assert min(pos[x] for x in readers[dec.output[0]]) - pos[dec.name] <= 2
    # Bit-identical to the PyOp codec (no ±Inf in these activations), under this order.
    settings = RuntimeSettings(execution_order=order)
    a = train(tmp_path / "native", steps=5, data="synthetic", seed=1, progress=False, return_parameters=True,
              settings=settings)
    b = train(tmp_path / "pyop", steps=5, data="synthetic", seed=1, progress=False, return_parameters=True,
              settings=settings)
    assert a.losses == b.losses
    assert np.array_equal(a.parameters.view(np.uint32), b.parameters.view(np.uint32))


def test_native_fp16_values_match_the_codec_bit_for_bit() -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from onnxcomp.custom_ops import get_codec

    # The same three ops the pass emits (Cast, Clip in float16, Cast back), on random, extreme and special values.
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT16),
         helper.make_node("Clip", ["c", "lo", "hi"], ["h"]),
         helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
        [helper.make_tensor("lo", TensorProto.FLOAT16, [], [np.float16(-65504.0)]),
         helper.make_tensor("hi", TensorProto.FLOAT16, [], [np.float16(65504.0)])])
    sess = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    x = np.concatenate([
        (rng.standard_normal(50_000) * 10.0 ** rng.integers(-9, 7, 50_000)).astype(np.float32),
        rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.array([np.nan, 0.0, -0.0, 65504, 65519.99, 65520, 1e9, -1e9, 2**-25, 1.5 * 2**-24, 2**-26, 1e-45],
                 np.float32)])
    finite_or_nan = ~np.isinf(x)
    y = sess.run(None, {"x": x})[0]
    codec = get_codec("dpr_fp16")
    ref = codec.decode_cpu(codec.encode_cpu(x))
    assert np.array_equal(y[finite_or_nan].view(np.uint32), ref[finite_or_nan].view(np.uint32))
    assert np.all(np.abs(y[np.isinf(x)]) == 65504.0)   # the one documented difference
