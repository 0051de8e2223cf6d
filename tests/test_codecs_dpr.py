"""DPR codecs (dpr_fp16 / dpr_bf16 / dpr_fp10 / dpr_fp8) against independent references.

The reference here shares no code with custom_ops/dpr.py: it enumerates each format's positive finite values
in float64 from (exponent, mantissa) and picks the nearest one for every input (ties to the even code),
saturating finite overflow at the largest value. fp16 is also checked against NumPy's float16 cast and bf16 /
fp8 against ml_dtypes (bfloat16, float8_e4m3) where installed.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pytest
from conftest import cupy_or_skip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnxcomp.custom_ops import dpr, get_codec

# Every test here runs against both CPU backends: the NumPy reference and the compiled kernels.
pytestmark = pytest.mark.usefixtures("codec_backend")

# name -> (exponent bits, mantissa bits, bias, largest finite value, codec payload dtype, codes per element)
SPEC = {
    "fp16": (5, 10, 15, 65504.0, np.uint16, 1),
    "bf16": (8, 7, 127, 3.3895313892515355e38, np.uint16, 1),
    "fp10": (5, 4, 15, 63488.0, np.uint32, 3),
    "fp8": (4, 3, 7, 240.0, np.uint8, 1),
}
NAMES = list(SPEC)


def codec(name: str) -> Any:
    return get_codec(f"dpr_{name}")


# -- independent reference --------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def ref_values(name: str) -> np.ndarray:
    """float64 value of every positive finite code 0 .. inf_code-1 (ascending, as codes are monotonic)."""
    e_bits, m_bits, bias, *_ = SPEC[name]
    codes = np.arange(((1 << e_bits) - 1) << m_bits)
    e, m = codes >> m_bits, codes & ((1 << m_bits) - 1)
    vals = np.where(e == 0, m * 2.0 ** (1 - bias - m_bits), (1 + m / 2.0**m_bits) * 2.0 ** (e - bias))
    assert np.all(np.diff(vals) > 0)
    return vals


def ref_codes(x: np.ndarray, name: str) -> np.ndarray:
    """Codes (int64) of float32 x: nearest value, ties to even code, saturate, Inf -> Inf, NaN -> quiet NaN."""
    e_bits, m_bits, *_ = SPEC[name]
    vals = ref_values(name)
    inf_code, sign_bit = ((1 << e_bits) - 1) << m_bits, 1 << (e_bits + m_bits)
    x = np.asarray(x, np.float32).reshape(-1)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        ax = np.abs(x.astype(np.float64))
    finite = np.isfinite(ax)
    axf = np.where(finite, ax, 0.0)
    hi = np.clip(np.searchsorted(vals, axf, side="left"), 0, vals.size - 1)  # vals[hi] >= ax unless overflow
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = axf - vals[lo], vals[hi] - axf
    pick = np.where(d_hi < d_lo, hi, np.where(d_lo < d_hi, lo, np.where(hi % 2 == 0, hi, lo)))
    pick = np.where(vals[hi] == axf, hi, pick)
    pick = np.where(axf >= vals[-1], vals.size - 1, pick)  # saturation
    code = np.where(np.isnan(x), inf_code | (1 << (m_bits - 1)), np.where(np.isinf(x), inf_code, pick))
    return code.astype(np.int64) | np.where(np.signbit(x), sign_bit, 0)


def ref_decode(codes: np.ndarray, name: str) -> np.ndarray:
    """float32 values of codes (NaN codes -> NaN with the code's sign)."""
    e_bits, m_bits, *_ = SPEC[name]
    inf_code, sign_bit = ((1 << e_bits) - 1) << m_bits, 1 << (e_bits + m_bits)
    codes = np.asarray(codes, np.int64)
    mag = codes & (sign_bit - 1)
    vals = np.concatenate([ref_values(name), [np.inf]])
    out = np.where(mag > inf_code, np.nan, vals[np.minimum(mag, inf_code)])
    return np.where(codes & sign_bit, -out, out).astype(np.float32)


def ref_unpack(packed: np.ndarray, name: str, n: int) -> np.ndarray:
    if SPEC[name][5] == 3:
        w = packed.astype(np.int64)
        return np.stack([w & 0x3FF, (w >> 10) & 0x3FF, (w >> 20) & 0x3FF], axis=1).reshape(-1)[:n]
    return packed.astype(np.int64)


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal, except that any NaN matches any NaN of the same sign."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(np.signbit(a[nan]), np.signbit(b[nan]))
                and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def check(x: np.ndarray, name: str) -> np.ndarray:
    """Every property of one encode/decode; returns the decoded array."""
    c = codec(name)
    x = np.asarray(x, np.float32)
    x_before = x.copy()
    packed, shape = c.encode(x)
    assert np.array_equal(x.view(np.uint32), x_before.view(np.uint32))  # input untouched
    assert packed.dtype == SPEC[name][4] and shape.dtype == np.int64 and tuple(shape) == x.shape
    assert packed.ndim == 1 and packed.size == -(-x.size // SPEC[name][5])
    assert c.payload_nbytes((packed, shape)) == c.predicted_nbytes(x.shape)
    expected = ref_codes(x, name)
    np.testing.assert_array_equal(ref_unpack(packed, name, x.size), expected)
    if SPEC[name][5] == 3:  # unused bits 30-31 and a partial last word's unused fields are zero
        assert not np.any(packed >> np.uint32(30))
        if x.size % 3:
            assert int(packed[-1]) >> (10 * (x.size % 3)) == 0
    y = c.decode((packed, shape))
    assert y.dtype == np.float32 and y.shape == x.shape
    assert same_floats(y, ref_decode(expected, name).reshape(x.shape))
    assert same_floats(dpr.quantize(x, name), y)
    # Idempotent: a decoded tensor is representable, so it encodes to the same codes and bits.
    packed2, _ = c.encode(y)
    np.testing.assert_array_equal(packed2, packed)
    assert same_floats(c.decode((packed2, shape)), y)
    return y


def interesting(name: str) -> np.ndarray:
    """float32 values at and around every rounding decision: format values, midpoints (ties), midpoints
    +- one float32 ulp, the overflow and underflow edges (subsampled for the 16-bit formats)."""
    vals = ref_values(name)
    mids = (vals[:-1] + vals[1:]) / 2
    ulps = vals[-1] - vals[-2]
    edges = np.array([vals[-1] + ulps / 2, vals[-1] + ulps, vals[1] / 2, vals[1] / 4, vals[1] * 0.75], np.float64)
    with np.errstate(over="ignore"):  # bf16's max + ulp is 2**128: float32 Inf
        pts = np.concatenate([vals, mids, edges]).astype(np.float32)
    assert np.array_equal(pts[: vals.size + mids.size].astype(np.float64), np.concatenate([vals, mids]))
    pts = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(0))])
    if pts.size > 20000:
        pts = pts[np.random.default_rng(0).choice(pts.size, 20000, replace=False)]
    return np.concatenate([pts, -pts])


# -- the reference itself ---------------------------------------------------------------------------------
def test_reference_matches_numpy_and_ml_dtypes() -> None:
    """The test's own reference agrees with NumPy's float16 and ml_dtypes' RNE casts (finite, in range)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, interesting("fp16"), interesting("bf16"), interesting("fp8")])
    casts = [("fp16", np.float16)]
    try:
        import ml_dtypes
        casts += [("bf16", ml_dtypes.bfloat16), ("fp8", ml_dtypes.float8_e4m3)]
    except ImportError:
        pass
    for name, dt in casts:
        with np.errstate(all="ignore"):
            cast = x.astype(dt).astype(np.float32)
        ok = np.isfinite(x) & np.isfinite(cast)  # the cast overflows to Inf where DPR saturates
        assert same_floats(ref_decode(ref_codes(x[ok], name), name), cast[ok]), name
        over = np.isfinite(x) & ~np.isfinite(cast)
        assert np.all(np.abs(ref_decode(ref_codes(x[over], name), name)) == SPEC[name][3]), name


def test_format_constants() -> None:
    for name, (e, m, bias, vmax, *_) in SPEC.items():
        f = dpr.get_format(name)
        assert (f.ebits, f.mbits, f.bias, f.bits) == (e, m, bias, 1 + e + m)
        assert f.max_value == vmax == ref_values(name)[-1]
        assert f.min_subnormal == ref_values(name)[1] and f.min_normal == ref_values(name)[1 << m]
        assert dpr.get_format(f"dpr_{name}") is f is dpr.get_format(f)
        assert codec(name).fmt is f
        assert codec(name).lossless is False
    with pytest.raises(ValueError, match="unknown DPR format"):
        dpr.get_format("fp12")


@pytest.mark.parametrize("name", NAMES)
def test_decode_table_is_exact(name: str) -> None:
    f = dpr.get_format(name)
    codes = np.arange(1 << f.bits)
    assert same_floats(f.table, ref_decode(codes, name))
    if name == "fp16":  # bit for bit, NaN payloads included, the usual widening
        wide = codes.astype(np.uint16).view(np.float16).astype(np.float32)
        np.testing.assert_array_equal(f.table.view(np.uint32), wide.view(np.uint32))
    packed = codes.astype(SPEC[name][4])
    if SPEC[name][5] == 1:
        y = codec(name).decode((packed, np.array([codes.size], np.int64)))
        np.testing.assert_array_equal(y.view(np.uint32), f.table.view(np.uint32))


# -- hypothesis -------------------------------------------------------------------------------------------
def _arrays(name: str) -> st.SearchStrategy[np.ndarray]:
    elements = st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
                         st.sampled_from(interesting(name).tolist()))
    return hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9),
                      elements=elements)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_hypothesis(name: str) -> None:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_arrays(name))
    def run(x: np.ndarray) -> None:
        check(x, name)

    run()


@pytest.mark.parametrize("name", NAMES)
def test_every_rounding_decision(name: str) -> None:
    """All format values, all ties (subsampled for 16-bit formats), both neighbours of each tie."""
    x = interesting(name)
    check(x, name)


@pytest.mark.parametrize("name", NAMES)
def test_random_bit_patterns_across_chunks(name: str) -> None:
    """Every float32 class (subnormal, NaN payloads, huge) over a size that spans several NumPy chunks and
    ends mid fp10 word."""
    n = 2 * dpr._CHUNK + 4
    x = np.random.default_rng(7).integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    check(x, name)


def test_fp16_matches_numpy_cast() -> None:
    """fp16: bit-exact with NumPy's float16 cast except Inf-on-overflow (saturates) and NaN payloads."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.integers(0, 2**32, size=100_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        (rng.standard_normal(100_000) * 1e-5).astype(np.float32), interesting("fp16")])
    with np.errstate(all="ignore"):
        half = x.astype(np.float16)
    bits = dpr.encode_bits(x, "fp16")
    ok = np.isfinite(half) | ~np.isfinite(x)
    np.testing.assert_array_equal(bits[ok & ~np.isnan(x)], half.view(np.uint16)[ok & ~np.isnan(x)])
    np.testing.assert_array_equal(bits[~ok], np.where(x[~ok] > 0, 0x7BFF, 0xFBFF))


def test_bf16_matches_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.integers(0, 2**32, size=100_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        interesting("bf16")])
    with np.errstate(invalid="ignore"):  # signalling NaNs
        ref = x.astype(ml_dtypes.bfloat16)
    bits = dpr.encode_bits(x, "bf16")
    ok = np.isfinite(x) & np.isfinite(ref.astype(np.float32))
    ref = ref.view(np.uint16)
    np.testing.assert_array_equal(bits[ok], ref[ok])


# -- explicit cases ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name: str) -> None:
    e, m, bias, vmax, *_ = SPEC[name]
    f = dpr.get_format(name)
    sub = f.min_subnormal
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, vmax, -vmax, min(2 * vmax, 3.4e38), -3.4e38,
                  np.finfo(np.float32).max, 1e-45, -1e-45, sub / 2, -sub / 2,
                  np.nextafter(np.float32(sub / 2), np.float32(1)), sub * 1.5, sub * 2.5, f.min_normal, 1.0, -2.0],
                 np.float32)
    y = check(x, name)
    assert np.isnan(y[0]) and not np.signbit(y[0]) and np.isnan(y[1]) and np.signbit(y[1])
    assert y[2] == np.inf and y[3] == -np.inf
    assert y[4] == 0 and not np.signbit(y[4]) and y[5] == 0 and np.signbit(y[5])
    np.testing.assert_array_equal(y[6:11], [vmax, -vmax, vmax, -vmax, vmax])  # saturation, never Inf
    assert y[11] == 0 and not np.signbit(y[11]) and y[12] == 0 and np.signbit(y[12])  # underflow, sign kept
    assert y[13] == 0 and y[14] == 0 and np.signbit(y[14])  # half the smallest subnormal: tie to even (0)
    assert y[15] == np.float32(sub)  # just above the tie rounds up
    assert y[16] == np.float32(2 * sub) and y[17] == np.float32(2 * sub)  # 1.5 -> 2, 2.5 -> 2 (ties to even)
    np.testing.assert_array_equal(y[18:], np.array([f.min_normal, 1.0, -2.0], np.float32))
    codes = dpr.encode_bits(x, name).astype(np.int64)
    inf_code, sign_bit = ((1 << e) - 1) << m, 1 << (e + m)
    assert codes[:4].tolist() == [inf_code | 1 << (m - 1), sign_bit | inf_code | 1 << (m - 1), inf_code,
                                  sign_bit | inf_code]
    assert codes[4] == 0 and codes[5] == sign_bit


@pytest.mark.parametrize("name", NAMES)
def test_edges_one_at_a_time(name: str) -> None:
    """Each edge value alone (the NumPy encoder skips fix-ups a chunk does not need, judged by its max)."""
    vals = ref_values(name)
    half_ulp = (vals[-1] - vals[-2]) / 2
    with np.errstate(over="ignore"):
        edges = np.array([vals[-1], vals[-1] + half_ulp, vals[-1] + half_ulp * 1.01, vals[-1] + 2 * half_ulp,
                          vals[-1] + half_ulp * 0.99, vals[1] / 2, vals[1] / 1.9, np.inf, np.nan, 3.4e38],
                         np.float64).astype(np.float32)
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf))])
    for v in np.concatenate([edges, -edges]):
        check(np.array([v], np.float32), name)
        check(np.array([v, 1.0, 0.0], np.float32), name)


def test_known_bit_patterns() -> None:
    x = np.array([1.0, -1.0, 240.0, 0.5, 2.0 ** -9, 1000.0], np.float32)
    assert dpr.encode_bits(x, "fp8").tolist() == [0x38, 0xB8, 0x77, 0x30, 0x01, 0x77]
    assert dpr.encode_bits(x, "fp16").tolist() == [0x3C00, 0xBC00, 0x5B80, 0x3800, 0x1800, 0x63D0]
    assert dpr.encode_bits(x, "bf16").tolist() == [0x3F80, 0xBF80, 0x4370, 0x3F00, 0x3B00, 0x447A]
    assert dpr.encode_bits(x, "fp10").tolist() == [0xF0, 0x2F0, 0x16E, 0xE0, 0x60, 0x18F]
    # fp10 packing: element 3w+j in bits 10j.. of word w; last word zero-padded.
    packed, shape = codec("fp10").encode(np.array([1.0, 2.0, -1.0, 0.5], np.float32))
    assert packed.tolist() == [0xF0 | 0x100 << 10 | 0x2F0 << 20, 0xE0] and shape.tolist() == [4]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0, 2), (), (1,), (2,), (4,), (5,), (7, 1), (2, 3, 5, 7)])
def test_shapes(name: str, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    y = check(x, name)
    assert y.shape == shape


@pytest.mark.parametrize("name", NAMES)
def test_relative_error_bound(name: str) -> None:
    f = dpr.get_format(name)
    rng = np.random.default_rng(11)
    lo, hi = np.log2(f.min_normal), np.log2(f.max_value)
    x = (np.exp2(rng.uniform(lo, hi, 200_000)) * rng.choice([-1, 1], 200_000)).astype(np.float32)
    x = x[(np.abs(x) >= f.min_normal) & (np.abs(x) <= f.max_value)]
    q = dpr.quantize(x, name).astype(np.float64)
    rel = np.abs(q - x) / np.abs(x.astype(np.float64))
    bound = 2.0 ** -(SPEC[name][1] + 1)
    assert f.rel_error_bound == bound
    assert rel.max() <= bound and rel.max() > bound / 2  # tight: the bound is approached
    # Subnormal range: absolute error at most half a subnormal step.
    xs = (rng.uniform(-1, 1, 100_000) * f.min_normal).astype(np.float32)
    assert np.abs(dpr.quantize(xs, name).astype(np.float64) - xs).max() <= f.min_subnormal / 2


@pytest.mark.parametrize("name", NAMES)
def test_non_contiguous_and_ml_like_input(name: str) -> None:
    rng = np.random.default_rng(2)
    x = np.maximum(rng.standard_normal((4, 6, 5)), 0).astype(np.float32).transpose(2, 0, 1)[:, ::2]
    y = check(x, name)
    np.testing.assert_array_equal(y, dpr.quantize(np.ascontiguousarray(x), name))


@pytest.mark.parametrize("name", NAMES)
def test_sample_inputs(name: str) -> None:
    for x, params in codec(name).sample_inputs(np.random.default_rng(0)):
        assert params == {}
        check(x, name)


@pytest.mark.parametrize("name", NAMES)
def test_bad_input(name: str) -> None:
    c = codec(name)
    with pytest.raises(ValueError, match="float32"):
        c.encode(np.ones(4, np.float64))
    packed, shape = c.encode(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="cannot hold"):
        c.decode((packed[:-1], shape))
    with pytest.raises(ValueError, match="cannot hold"):
        c.decode((packed, np.array([3, 5], np.int64)))
    with pytest.raises(ValueError, match="must be"):
        c.decode((packed.astype(np.int64), shape))
    with pytest.raises(ValueError, match="negative"):
        c.decode((packed, np.array([-3, -4], np.int64)))


# -- the CUDA source's arithmetic, compiled for the host (no GPU needed) ------------------------------------
# A shim maps the CUDA built-ins onto host C++ and runs each kernel as one thread (grid-stride loops then
# cover every element). This checks the .cu's bit arithmetic against NumPy on machines without a GPU; the
# GPU tests below check the real thing.
_HOST_SHIM = r"""
#include <cstring>
#include <algorithm>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
struct U3 { unsigned int x, y, z; };
static const U3 blockIdx{0, 0, 0}, threadIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) ushort4 { unsigned short x, y, z, w; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
using std::min;
#include "KERNEL"
"""


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import ctypes
    import shutil
    import subprocess

    from onnxcomp.custom_ops.base import KERNEL_DIR

    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("dpr_host")
    (d / "shim.cpp").write_text(_HOST_SHIM.replace("KERNEL", str(KERNEL_DIR / "dpr.cu")))
    lib = d / "libdpr_host.so"
    # -ffp-contract=off: no FMA contraction, as __fadd_rn/__fmul_rn guarantee on the GPU
    cmd = [cxx, "-O2", "-std=c++14", "-shared", "-fPIC", "-ffp-contract=off", "-Wno-unknown-pragmas",
           "-o", str(lib), str(d / "shim.cpp")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(lib))


@pytest.mark.parametrize("name", NAMES)
def test_cuda_source_arithmetic_on_host(name: str, host_kernels: Any) -> None:
    import ctypes

    c = codec(name)
    rng = np.random.default_rng(13)
    x = np.concatenate([rng.integers(0, 2**32, size=300_001, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        interesting(name), (rng.standard_normal(10_000) * 1e-3).astype(np.float32)])
    ptr, i64 = ctypes.c_void_p, ctypes.c_longlong
    for xs in [x, x[:1], x[:2], x[:4], x[:0]]:
        packed, shape = c.encode(xs)
        out = np.zeros(max(packed.size, 1), packed.dtype) + packed.dtype.type(0xAB)  # catch unwritten words
        getattr(host_kernels, f"dpr_{name}_encode")(ptr(xs.ctypes.data), ptr(out.ctypes.data), i64(xs.size),
                                                    i64(packed.size))
        np.testing.assert_array_equal(out[:packed.size], packed)
        y = np.empty(max(xs.size, 1), np.float32)
        getattr(host_kernels, f"dpr_{name}_decode")(ptr(packed.ctypes.data), ptr(y.ctypes.data), i64(xs.size))
        np.testing.assert_array_equal(y[:xs.size].view(np.uint32), c.decode((packed, shape)).view(np.uint32))
    codes = np.arange(1 << c.fmt.bits)
    if SPEC[name][5] == 1:  # every code decodes like the table
        packed = codes.astype(SPEC[name][4])
        y = np.empty(codes.size, np.float32)
        getattr(host_kernels, f"dpr_{name}_decode")(ptr(packed.ctypes.data), ptr(y.ctypes.data), i64(codes.size))
        np.testing.assert_array_equal(y.view(np.uint32), c.fmt.table.view(np.uint32))


# -- GPU: same bytes as NumPy (skipped without CuPy + a GPU) ----------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_gpu_bytes_match_cpu(name: str) -> None:
    cp = cupy_or_skip()
    c = codec(name)
    rng = np.random.default_rng(9)
    cases = [x for x, _ in c.sample_inputs(rng)]
    cases += [interesting(name),
              rng.integers(0, 2**32, size=(1 << 24) + 5, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    for x in cases:  # the last case exceeds the capped grid: exercises the grid-stride loops
        cpu = c.encode(x)
        gpu = c.encode(cp.asarray(x))
        for a, b in zip(cpu, gpu):
            assert isinstance(b, cp.ndarray) and b.dtype == a.dtype
            np.testing.assert_array_equal(b.get(), a)
        expected = c.decode(cpu)
        np.testing.assert_array_equal(c.decode(gpu).get().view(np.uint32), expected.view(np.uint32))
        cross = c.decode(tuple(cp.asarray(p) for p in cpu)).get()
        np.testing.assert_array_equal(cross.view(np.uint32), expected.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_gpu_decodes_every_code(name: str) -> None:
    cp = cupy_or_skip()
    f = dpr.get_format(name)
    c = codec(name)
    if SPEC[name][5] == 3:
        c3 = np.append(np.arange(1 << f.bits, dtype=np.uint32), np.zeros(2, np.uint32)).reshape(-1, 3)
        packed = c3[:, 0] | c3[:, 1] << 10 | c3[:, 2] << 20
    else:
        packed = np.arange(1 << f.bits).astype(SPEC[name][4])
    shape = np.array([1 << f.bits], np.int64)
    y = c.decode((cp.asarray(packed), cp.asarray(shape))).get()
    np.testing.assert_array_equal(y.view(np.uint32), f.table.view(np.uint32))
