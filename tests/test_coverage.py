"""Coverage by gradient semantics (issue 12 item 4): what each backward reader needs of a stash decides the
technique. Hand-written graphs (onnx.parser) in the shape ORT 1.19's gradient builder gives them, the
intervalmask codec (NumPy vs numba bitstreams, the CUDA kernel's comparison emulated), and a short training
run of a LeakyReLU + ReLU6 + HardSigmoid/HardSwish + Dropout net compared bit for bit."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import parse

from onnxcomp.analysis import analyze_model
from onnxcomp.analysis.patterns import (BITMASK, DPR, ERROR_BOUNDED, INTERVAL_MASK, SIGNBITS, SPARSE, TECHNIQUES,
                                        technique_table)
from onnxcomp.custom_ops import contract, cpu, get_codec
from onnxcomp.passes import DropoutMaskPass, IntervalMaskPass, SignBitsPass
from onnxcomp.passes.base import check_model

_CONV = 'pads=[1,1,1,1], strides=[1,1], dilations=[1,1], group=1, kernel_shape=[3,3]'
_HEAD = """<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4,3,3,3] w1_buf, bool lazy_reset_grad, float loss_grad)
      => (bool w1_flag)"""
_TAIL = f"""
  dinput, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, input, w1)
  w1_flag = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}}"""

# LeakyRelu: ORT's LeakyReluGrad reads the output y (GetLeakyReluGradient: {GO(0), O(0)}).
LEAKY = _HEAD + """{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  y = LeakyRelu <alpha=0.1> (x)
  loss = ReduceSum <keepdims=0> (y)
  y_shape = Shape (y)
  dy = Expand (loss_grad, y_shape)
  dx = com.microsoft.LeakyReluGrad <alpha=0.1> (dy, y)""" + _TAIL

# Clip (ReLU6): GetClipGradient's comparisons, And, Cast and Mul. The comparisons read no gradient.
CLIP = _HEAD + """{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  lo = Constant <value = float {0.0}> ()
  hi = Constant <value = float {6.0}> ()
  y = Clip (x, lo, hi)
  loss = ReduceSum <keepdims=0> (y)
  y_shape = Shape (y)
  dy = Expand (loss_grad, y_shape)
  le = LessOrEqual (x, hi)
  ge = GreaterOrEqual (x, lo)
  inside = And (ge, le)
  mask = Cast <to=1> (inside)
  dx = Mul (dy, mask)""" + _TAIL

# Dropout after a conv: DropoutGrad reads the bool keep-mask.
DROPOUT = _HEAD + """{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  ratio = Constant <value = float {0.25}> ()
  training = Constant <value = bool {1}> ()
  y, keep = Dropout (x, ratio, training)
  loss = ReduceSum <keepdims=0> (y)
  y_shape = Shape (y)
  dy = Expand (loss_grad, y_shape)
  dx = com.microsoft.DropoutGrad (dy, keep, ratio, training)""" + _TAIL

# Two ReLU outputs concatenated (a fire module) and read by the next conv's gradient: seen through the Concat,
# the stash is sparse; the same concat of a conv output and a ReLU output is not.
CONCAT = """<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4,8,3,3] w2, float[4,3,3,3] w1_buf, float[4,8,3,3] w2_buf,
       bool lazy_reset_grad, float loss_grad) => (bool w1_flag, bool w2_flag)
{
  a = Conv <pads=[1,1,1,1]> (input, w1)
  r1 = Relu (a)
  r2 = Relu (a)
  c = Concat <axis=1> (r1, r2)
  cf = Flatten <axis=0> (c)
  cv = Reshape (cf, cshape)
  z = Conv <pads=[1,1,1,1]> (cv, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dc, w2_grad, db2 = com.microsoft.ConvGrad <%s> (dz, cv, w2)
  w2_flag = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_flag = com.microsoft.InPlaceAccumulatorV2 (w1_buf, dc, lazy_reset_grad)
}""".replace("%s", _CONV)


def _graph(text: str) -> onnx.ModelProto:
    model = parse(text)
    if "cshape" in text:
        model.graph.initializer.append(onnx.helper.make_tensor("cshape", onnx.TensorProto.INT64, [4], [2, 8, 8, 8]))
    return model


def _stash(model: onnx.ModelProto, name: str):  # noqa: ANN202
    return next(s for s in analyze_model(model).stashed if s.name == name)


def _ours(model: onnx.ModelProto, role: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if (op := contract.codec_op(n.domain, n.op_type)) and op.role == role]


# -- analysis: the semantic table ------------------------------------------------------------------------------
def test_every_technique_applies_or_says_why_not() -> None:
    for text in (LEAKY, CLIP, DROPOUT, CONCAT):
        for s in analyze_model(_graph(text)).stashed:
            table = technique_table(s.use)
            assert set(table) == set(TECHNIQUES)
            assert all(why is None or (isinstance(why, str) and why) for why in table.values())
            # what the planners enumerate is what the table says applies
            assert set(s.encodings) <= {t for t, why in table.items() if why is None}


def test_leaky_relu_output_needs_only_its_sign() -> None:
    s = _stash(_graph(LEAKY), "y")
    assert s.pattern == "LeakyRelu-output→LeakyReluGrad" and s.encodings == (SIGNBITS,)
    table = technique_table(s.use)
    assert table[SIGNBITS] is None and "sign" in table[DPR] and "sign" in table[SPARSE]


def test_clip_mask_needs_only_an_interval() -> None:
    model = _graph(CLIP)
    s = _stash(model, "mask")
    assert s.pattern == "Clip-mask→Mul" and s.encodings == (INTERVAL_MASK,)
    assert technique_table(s.use)[INTERVAL_MASK] is None
    assert "x" not in {t.name for t in analyze_model(model).stashed}  # by data flow the comparisons are forward


def test_dropout_mask_is_a_bitmask_in_any_graph() -> None:
    s = _stash(_graph(DROPOUT), "keep")
    assert s.pattern == "Dropout-mask→DropoutGrad" and s.encodings == (BITMASK,)


def test_concat_and_views_are_seen_through() -> None:
    s = _stash(_graph(CONCAT), "cv")
    assert s.use.sources == ("Relu", "Relu") and s.use.sparse_source == "Relu" and SPARSE in s.encodings
    mixed = _graph(CONCAT.replace("r2 = Relu (a)", "r2 = Identity (a)"))
    s = _stash(mixed, "cv")
    assert sorted(s.use.sources) == ["Conv", "Relu"] and SPARSE not in s.encodings


def test_batchnorm_input_is_a_lossy_candidate(small_artifacts: Path) -> None:
    from onnxcomp.analysis import analyze

    bn = next(s for s in analyze(small_artifacts).stashed if s.pattern == "Conv-output→BatchNormalizationGrad")
    table = technique_table(bn.use)
    assert {DPR, ERROR_BOUNDED} <= set(bn.encodings) and table[DPR] is None and table[ERROR_BOUNDED] is None
    assert table[SIGNBITS] and table[SPARSE]


# -- passes on the hand-written graphs --------------------------------------------------------------------------
@pytest.mark.parametrize("native", [False, True])
def test_leaky_relu_grad_reads_the_sign_bits_as_float(native: bool) -> None:
    result = SignBitsPass(native=native).run(_graph(LEAKY))
    out = result.model
    check_model(out, "signbits")
    (rec,) = result.records
    assert rec["tensor"] == "y" and rec["codec"] == "bitmask" and rec["encoded_tensor"] == "y"
    grad = next(n for n in out.graph.node if n.op_type == "LeakyReluGrad")
    cast = next(n for n in out.graph.node if grad.input[1] in n.output)
    if native:   # the mask is the native decode's Reshape(Gather(LUT, bytes)) (encode_stash._encode_native_bits)
        assert rec["native"] == "bits" and not _ours(out, "decode")
        dec = next(n for n in out.graph.node if n.name == rec["decoder"])
    else:
        (dec,) = _ours(out, "decode")
    assert cast.op_type == "Cast" and cast.input[0] == dec.output[0]


def test_interval_mask_encodes_the_clip_input_and_drops_the_comparisons() -> None:
    result = IntervalMaskPass().run(_graph(CLIP))
    out = result.model
    check_model(out, "interval_mask")
    (rec,) = result.records
    assert rec["tensor"] == "mask" and rec["encoded_tensor"] == "x" and rec["codec"] == "intervalmask"
    assert {k: rec["params"][k] for k in ("lo", "hi")} == {"lo": 0.0, "hi": 6.0}
    ops = [n.op_type for n in out.graph.node]
    assert not {"GreaterOrEqual", "LessOrEqual", "And"} & set(ops)      # nothing keeps x until backward
    (enc,), (dec,) = _ours(out, "encode"), _ours(out, "decode")
    nodes = list(out.graph.node)
    conv = next(n for n in nodes if n.op_type == "Conv")
    assert enc.input[0] == "x" and nodes.index(enc) == nodes.index(conv) + 1
    mul = next(n for n in nodes if n.op_type == "Mul")
    cast = next(n for n in nodes if mul.input[1] in n.output)
    assert cast.op_type == "Cast" and cast.input[0] == dec.output[0] and nodes.index(dec) < nodes.index(mul)
    assert {s.name for s in analyze_model(out).stashed} >= {enc.output[0]}   # the bits are what is kept


def test_interval_mask_refuses_a_non_constant_bound() -> None:
    text = CLIP.replace("hi = Constant <value = float {6.0}> ()", "hi = ReduceMax <keepdims=0> (input)")
    result = IntervalMaskPass().run(_graph(text))
    assert not result.records and "not a constant scalar" in result.skipped[0].reason


def test_dropout_mask_pass_on_a_cnn_graph() -> None:
    result = DropoutMaskPass().run(_graph(DROPOUT))
    check_model(result.model, "dropout_mask")
    (rec,) = result.records
    assert rec["tensor"] == "keep" and rec["codec"] == "bitmask"


# -- the intervalmask codec -------------------------------------------------------------------------------------
def _reference_bits(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    inside = (x >= np.float32(lo)) & (x <= np.float32(hi))
    return np.packbits(inside.reshape(-1), bitorder="little")


def _cuda_emulated_bits(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """kernels/intervalmask.cu's comparison, on bit patterns mapped to an unsigned total order."""
    def key(u: np.ndarray) -> np.ndarray:
        u = np.where(u == np.uint32(0x80000000), np.uint32(0), u)
        return np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000))

    u = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32)
    klo, khi = (key(np.array([v], np.float32).view(np.uint32))[0] for v in (lo, hi))
    k = key(u)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.packbits(~nan & (k >= klo) & (k <= khi), bitorder="little")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_intervalmask_round_trip_and_bitstream(backend: str) -> None:
    codec = get_codec("intervalmask")
    rng = np.random.default_rng(7)
    cases = codec.sample_inputs(rng) + [(rng.standard_normal(70001).astype(np.float32) * 4, {"lo": -1.5, "hi": 2.25})]
    with cpu.use_backend(backend):
        for x, params in cases:
            bits, shape = codec.encode_cpu(x, **params)
            ref = _reference_bits(np.asarray(x), params["lo"], params["hi"])
            assert np.array_equal(bits, ref) and np.array_equal(_cuda_emulated_bits(np.asarray(x), **params), ref)
            mask = codec.decode_cpu((bits, shape), **params)
            assert mask.dtype == np.bool_ and mask.shape == np.asarray(x).shape
            assert np.array_equal(mask, (np.asarray(x) >= np.float32(params["lo"])) & (np.asarray(x) <= np.float32(params["hi"])))


def test_intervalmask_refuses_bad_bounds() -> None:
    codec = get_codec("intervalmask")
    for params in ({"lo": 0.0}, {"lo": math.nan, "hi": 1.0}, {"lo": 0.1, "hi": 1.0}, {"lo": "0", "hi": 1.0}):
        with pytest.raises(ValueError):
            codec.validate_params(**params)
    codec.validate_params(lo=-math.inf, hi=6.0)
    assert json.loads(contract.params_value({"lo": -math.inf, "hi": 6.0}))["lo"] == -math.inf


# -- bit-identical training --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mix_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ActivationMix's training artifacts (batch 4, 3x8x8) and its lossless-encode graph enc.onnx."""
    import torch
    from conftest import artifacts_from_net
    from coverage_nets import ActivationMix

    from onnxcomp.transform import transform

    torch.manual_seed(0)
    art = artifacts_from_net(ActivationMix(c=8, image=8), tmp_path_factory.mktemp("mix"), batch=4, in_channels=3,
                             height=8, width=8, meta={"model": "mix", "batch": 4, "image": [3, 8, 8], "classes": 10,
                                                      "inputs": ["input"], "labels": "labels"})
    result = transform(art, art / "enc.onnx", "lossless-encode", min_bytes=0)
    codecs = {r["codec"] for r in result.records}
    assert {"intervalmask", "bitmask", "maxpool_index"} <= codecs, codecs
    kinds = {r["pattern"].split("→")[0] for r in result.records if r["codec"] in ("bitmask", "intervalmask")}
    assert {"LeakyRelu-output", "Clip-mask"} <= kinds
    return art


def test_activation_mix_trains_bit_identically(mix_artifacts: Path) -> None:
    from onnxcomp.runtime.train import train

    base = train(mix_artifacts, steps=3, data="synthetic", seed=3, progress=False, return_parameters=True)
    enc = train(mix_artifacts, model="enc.onnx", steps=3, data="synthetic", seed=3, progress=False,
                return_parameters=True)
    assert len(set(base.losses)) > 1 and base.losses == enc.losses
    assert np.array_equal(base.parameters.view(np.uint32), enc.parameters.view(np.uint32))


def test_encoded_graph_runs_under_ort_default_settings(mix_artifacts: Path) -> None:
    """Several encoders each declaring two static int64[ndim] outputs made ORT's memory-reuse planner (on by
    default) abort the step; the shape payload is declared symbolic. Run in a child process (measure's)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "onnxcomp", "measure", str(mix_artifacts), "--model", "enc.onnx",
                          "--steps", "1", "--json", "--arena", "--mem-pattern", "--mem-reuse", "--order", "default"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-400:]
    assert all(math.isfinite(v) for v in json.loads(out.stdout)["losses"])


def test_inspect_lists_techniques_and_reasons() -> None:
    from rich.console import Console

    from onnxcomp.stash_report import inspect_report, render_report

    report = inspect_report(analyze_model(_graph(CLIP)))
    mask = next(s for s in report["stashed"] if s["name"] == "mask")
    assert mask["techniques"][INTERVAL_MASK] == {"applies": True}
    assert all(v["why_not"] for t, v in mask["techniques"].items() if t != INTERVAL_MASK)
    assert any(n.startswith("interval:") for n in mask["needs"])
    console = Console(width=200, record=True)
    render_report({**report, "model": "clip"}, console)
    text = console.export_text()
    assert "Techniques per stash" in text and "PRelu" in text and "intervalmask" in text
