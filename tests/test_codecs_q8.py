"""The q8 codec (custom_ops/q8.py): error ≤ scale/2 per element, specials, empty and odd shapes, refusals,
the CUDA source's arithmetic compiled on the host giving NumPy's bytes, and the Q8Pass on a small graph."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from typing import Any

import numpy as np
import pytest
from graphs import two_conv, two_fc
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnxcomp.custom_ops import contract, get_codec
from onnxcomp.custom_ops.base import KERNEL_DIR
from onnxcomp.custom_ops.q8 import groups
from onnxcomp.passes import POLICIES, Q8Pass
from onnxcomp.passes.base import check_model

CODECS = ("q8", "q8h")


def _meta(name: str, m: np.ndarray) -> np.ndarray:
    return m.view(np.float16).astype(np.float32) if name == "q8h" else m


def _check_bound(name: str, x: np.ndarray, layout: str) -> None:
    codec = get_codec(name)
    payload = codec.encode(x, layout=layout)
    y = codec.decode(payload, layout=layout)
    assert y.shape == x.shape and y.dtype == np.float32
    if x.size == 0:
        return
    a, g, b = groups(x.shape, layout)
    lo, scale = (_meta(name, m) for m in payload[1:3])
    v, w = x.reshape(a, g, b).astype(np.float64), y.reshape(a, g, b).astype(np.float64)
    finite = np.isfinite(x.reshape(a, g, b)).all(axis=(0, 2)) & np.isfinite(lo)
    # Per element: half a step of its own group, plus float32 rounding of the arithmetic (a few ulps).
    slack = 4 * np.spacing(np.maximum(np.abs(v), np.abs(lo[None, :, None])).astype(np.float32)).astype(np.float64)
    err = np.abs(w - v)[:, finite, :]
    assert np.all(err <= (scale[None, finite, None] / 2 + slack[:, finite, :]))
    assert np.all(np.isnan(w[:, ~finite, :]))       # a group with NaN/Inf decodes to NaN, nothing silent
    assert payload[0].dtype == np.uint8 and payload[0].size == x.size


finite_f32 = st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=9), elements=finite_f32),
       name=st.sampled_from(CODECS), layout=st.sampled_from(["channels", "rows"]))
@example(x=np.array([[1e-44]], np.float32), name="q8h", layout="channels")  # range underflowed to a zero scale
def test_error_at_most_half_a_step(x: np.ndarray, name: str, layout: str) -> None:
    _check_bound(name, x, layout)


@pytest.mark.parametrize("name", CODECS)
def test_specials_empty_and_odd_shapes(name: str) -> None:
    codec = get_codec(name)
    for x, params in codec.sample_inputs(np.random.default_rng(3)):
        _check_bound(name, x, params["layout"])
    special = np.array([[np.nan, 1.0], [np.inf, 2.0], [-np.inf, 0.0], [5.0, 5.0], [-0.0, 1e-45]], np.float32)
    y = codec.decode(codec.encode(special, layout="rows"), layout="rows")
    assert np.isnan(y[:3]).all() and (y[3] == 5.0).all()        # constant row: exact
    assert np.abs(y[4] - special[4]).max() <= np.float32(1e-45)
    assert codec.decode(codec.encode(np.float32(-2.5).reshape(()), layout="rows"), layout="rows") == -2.5


def test_float16_meta_out_of_range_decodes_nan_and_float32_meta_does_not() -> None:
    x = np.array([[1e6, -1e6, 3.0]], np.float32)
    assert np.isnan(get_codec("q8h").decode(get_codec("q8h").encode(x, layout="rows"), layout="rows")).all()
    _check_bound("q8", x, "rows")


@pytest.mark.parametrize("name", CODECS)
def test_refuses_bad_params_and_payloads(name: str) -> None:
    codec = get_codec(name)
    with pytest.raises(ValueError, match="channel axis 1"):
        codec.encode(np.zeros(5, np.float32), layout="channels")
    with pytest.raises(ValueError, match="unknown q8 layout"):
        codec.validate_params(layout="cols")
    codes, lo, scale, shape = codec.encode(np.ones((2, 3, 4), np.float32), layout="channels")
    with pytest.raises(ValueError, match="codes must be uint8"):
        codec.decode((codes[:-1], lo, scale, shape), layout="channels")
    with pytest.raises(ValueError, match="lo and scale"):
        codec.decode((codes, lo[:1], scale, shape), layout="channels")
    # rows of a [2, 3, 4] tensor are 6 groups, channels 3: the layout must match the encoder's
    with pytest.raises(ValueError, match="lo and scale"):
        codec.decode((codes, lo, scale, shape), layout="rows")


def test_predicted_size_is_the_payload_size() -> None:
    for name in CODECS:
        codec = get_codec(name)
        for shape, layout in [((4, 8, 5, 5), "channels"), ((3, 7, 16), "rows")]:
            payload = codec.encode(np.ones(shape, np.float32), layout=layout)
            assert codec.payload_nbytes(payload) == codec.predicted_nbytes(shape, layout=layout)


# -- the CUDA source, compiled for the host, against NumPy ------------------------------------------------
_SHIM = r"""
#include <cmath>
#include <cstring>
#define __global__
#define __restrict__
#define __forceinline__ inline
struct U3 { unsigned int x, y, z; };
static const U3 blockIdx{0, 0, 0}, threadIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
using std::rintf; using std::fminf; using std::fmaxf;
#include "KERNEL"
"""


@pytest.fixture(scope="module")
def host_q8(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("q8_host")
    (d / "shim.cpp").write_text(_SHIM.replace("KERNEL", str(KERNEL_DIR / "q8.cu")))
    lib = d / "libq8_host.so"
    # -ffp-contract=off: no FMA contraction, as __fadd_rn/__fmul_rn guarantee on the GPU
    res = subprocess.run([cxx, "-O2", "-std=c++14", "-shared", "-fPIC", "-ffp-contract=off", "-o", str(lib),
                          str(d / "shim.cpp")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(lib))


@pytest.mark.parametrize("name", CODECS)
def test_cuda_source_arithmetic_on_host(name: str, host_q8: Any) -> None:
    from onnxcomp.custom_ops.q8 import group_meta

    codec = get_codec(name)
    rng = np.random.default_rng(5)
    ptr, i64 = ctypes.c_void_p, ctypes.c_longlong
    bits = rng.integers(0, 2**32, size=(3, 5, 7, 11), dtype=np.uint64).astype(np.uint32).view(np.float32)
    cases = [(bits, "channels"), ((rng.standard_normal((6, 33)) * 50).astype(np.float32), "rows"),
             *codec.sample_inputs(np.random.default_rng(9))]
    for x, layout in [(c[0], c[1]["layout"]) if isinstance(c[1], dict) else c for c in cases]:
        if x.size == 0:
            continue
        codes, stored_lo, stored_scale, shape = codec.encode(x, layout=layout)
        a, g, b = groups(x.shape, layout)
        with np.errstate(over="ignore", invalid="ignore"):
            lo, inv, _, _ = group_meta(np.asarray(x, np.float32).reshape(a, g, b), np, codec.half)
        xs = np.ascontiguousarray(x, np.float32).reshape(-1)
        out = np.full(xs.size, 0xAB, np.uint8)
        host_q8.q8_encode(ptr(xs.ctypes.data), ptr(lo.ctypes.data), ptr(inv.ctypes.data), ptr(out.ctypes.data),
                          i64(xs.size), i64(g), i64(b))
        np.testing.assert_array_equal(out, codes)
        lo32, scale32 = (np.ascontiguousarray(_meta(name, m), np.float32) for m in (stored_lo, stored_scale))
        y = np.empty(xs.size, np.float32)
        host_q8.q8_decode(ptr(codes.ctypes.data), ptr(lo32.ctypes.data), ptr(scale32.ctypes.data),
                          ptr(y.ctypes.data), i64(xs.size), i64(g), i64(b))
        want = codec.decode((codes, stored_lo, stored_scale, shape), layout=layout).reshape(-1)
        np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


# -- the pass ---------------------------------------------------------------------------------------------
def test_q8_pass_takes_the_dpr_candidates_with_the_layout_of_their_reader() -> None:
    result = Q8Pass(min_bytes=0).run(two_conv())
    out = result.model
    check_model(out, "q8")
    (rec,) = result.records
    assert rec["tensor"] == "y" and rec["codec"] == "q8" and rec["params"]["layout"] == "channels"
    assert rec["predicted_bytes"] == get_codec("q8").predicted_nbytes((2, 4, 8, 8), layout="channels")
    dec = next(n for n in out.graph.node if contract.is_decoder(n.domain, n.op_type, "q8"))
    conv_grad = next(n for n in out.graph.node if n.name == "ConvGrad_6")
    assert conv_grad.input[1] == dec.output[0]
    fc = Q8Pass(min_bytes=0, meta="float16").run(two_fc())
    assert {r["tensor"]: (r["codec"], r["params"]["layout"]) for r in fc.records} == {"r": ("q8h", "rows")}
    assert "q8" in POLICIES and {s.make for s in POLICIES["q8"].steps} >= {Q8Pass}


def test_q8_policy_trains_close_to_baseline(small_artifacts: Any, tmp_path: Any) -> None:
    import math

    from onnxcomp.runtime.train import train
    from onnxcomp.transform import transform

    out = tmp_path / "q8"
    result = transform(small_artifacts, out, "q8", min_bytes=0)
    codecs = {r["codec"] for r in result.records}
    assert "q8" in codecs and "bitmask" in codecs         # ReluGrad keeps exact signs, the rest is q8
    base = train(small_artifacts, steps=4, data="synthetic", seed=1, progress=False)
    q8 = train(out, steps=4, data="synthetic", seed=1, progress=False)
    # The forward pass is untouched (FP32): the first loss is bit-identical; later ones drift a little.
    assert q8.losses[0] == base.losses[0]
    assert all(math.isfinite(v) for v in q8.losses)
    assert np.allclose(q8.losses, base.losses, rtol=0.05)
