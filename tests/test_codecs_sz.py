"""The ``sz`` error-bounded lossy codec: the bound on every finite element, specials, the bitstream layout
(against a per-element reference encoder written from the spec), determinism, zstd, sizes, bad input, and
GPU == CPU bytes (skipped without CuPy + a GPU)."""
from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from conftest import cupy_or_skip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import onnxcomp.custom_ops.sz as sz  # registers "sz" (also when custom_ops/__init__ does not import it)
from onnxcomp.custom_ops import get_codec

# Every test here runs against both CPU backends: the NumPy reference and the compiled kernels.
pytestmark = pytest.mark.usefixtures("codec_backend")

SZ = get_codec("sz")
F32_MAX = float(np.finfo(np.float32).max)


# -- helpers -------------------------------------------------------------------------------------------------
def _check_round_trip(x: np.ndarray, eb: float, **params: Any) -> tuple[Any, np.ndarray]:
    """Encode/decode (decode with no params) and assert every guarantee of the codec; returns (payload, y)."""
    payload = SZ.encode(x, eb=eb, **params)
    assert len(payload) == len(SZ.payload_names)
    for arr, dt in zip(payload, SZ.payload_dtypes):
        assert arr.dtype == np.dtype(dt)
    y = SZ.decode(payload)
    assert y.dtype == np.float32 and y.shape == x.shape
    xf, yf = x.reshape(-1), y.reshape(-1)
    finite = np.isfinite(xf)
    err = np.abs(xf[finite].astype(np.float64) - yf[finite].astype(np.float64))
    assert (err <= eb).all(), f"bound {eb} broken: max error {err.max()} at {xf[finite][err.argmax()]!r}"
    nan = np.isnan(xf)
    assert np.array_equal(np.isnan(yf), nan)
    # NaNs and infinities are outliers: their exact bits come back (NaN payload and sign included).
    np.testing.assert_array_equal(yf.view(np.uint32)[~finite], xf.view(np.uint32)[~finite])
    assert (yf[xf == 0] == 0).all()  # zero filter: exact zeros stay exactly zero (both signs)
    return payload, y


def reference_encode(x: np.ndarray, eb: float) -> tuple[bytes, bytes, list[int], list[int]]:
    """Element-by-element encoder written from the format spec (as the CUDA kernel does it: lane k <-> bit k).

    Returns (rates, data, outlier indices, outlier bits)."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    twoeb, recip = 2.0 * eb, 1.0 / (2.0 * eb)
    q, out_idx = [], []
    for i, v in enumerate(flat.tolist()):
        qf = v * recip
        qi = round(qf) if np.isfinite(qf) and abs(round(qf)) <= sz.QMAX else 0  # round(): half to even
        xh = float(np.float32(qi * twoeb)) if np.isfinite(np.float32(qi * twoeb)) else float("inf")
        if not abs(v - xh) <= eb:
            out_idx.append(i)
        q.append(qi)
    rates, data = bytearray(), bytearray()
    for b0 in range(0, len(q), sz.BLOCK):
        blk = q[b0:b0 + sz.BLOCK]
        d = [blk[0]] + [blk[k] - blk[k - 1] for k in range(1, len(blk))]
        d += [0] * (sz.BLOCK - len(d))
        r = max(abs(v) for v in d).bit_length()
        rates.append(r)
        if r:
            data += struct.pack("<I", sum(1 << k for k, v in enumerate(d) if v < 0))
            for j in range(r):
                data += struct.pack("<I", sum(((abs(v) >> j) & 1) << k for k, v in enumerate(d)))
    bits = flat.view(np.uint32)[out_idx].tolist()
    return bytes(rates), bytes(data), out_idx, bits


# -- the error bound, property-tested ------------------------------------------------------------------------
_SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1.1754942e-38, F32_MAX, -F32_MAX],
                     dtype=np.float32)
_NAN_PAYLOAD = np.array([0x7FC00001, 0xFFC12345, 0x7F800001], dtype=np.uint32).view(np.float32)  # quiet/signalling


def _make_case(seed: int, n: int, kind: str, log_scale: float, log_eb: float, special_frac: float,
               zero_frac: float, as_scalar: bool) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(seed)
    eb = float(10.0 ** log_eb)
    scale = 10.0 ** log_scale
    with np.errstate(over="ignore"):
        if kind == "normal":
            x = (rng.standard_normal(n) * scale).astype(np.float32)
        elif kind == "relu":
            x = (np.maximum(rng.standard_normal(n), 0) * scale).astype(np.float32)
        elif kind == "smooth":  # a random walk: what Lorenzo predicts well
            x = (np.cumsum(rng.standard_normal(n)) * scale).astype(np.float32)
        elif kind == "const":
            x = np.full(n, rng.standard_normal() * scale, dtype=np.float32)
        else:  # "near_half": values at the rounding boundaries of the quantizer, nudged by a few ulps
            k = rng.integers(-3000, 3000, size=n).astype(np.float64)
            x = ((k + 0.5) * 2.0 * eb).astype(np.float32)
            x = np.nextafter(x, np.where(rng.random(n) < 0.5, np.inf, -np.inf).astype(np.float32))
    if n:
        x[rng.random(n) < zero_frac] = 0.0
        mask = rng.random(n) < special_frac
        x[mask] = rng.choice(np.concatenate([_SPECIALS, _NAN_PAYLOAD]), size=int(mask.sum()))
    if as_scalar and n == 1:
        return x.reshape(()), eb
    return (x.reshape(2, n // 2) if n % 2 == 0 and n else x), eb


# Random cases: sizes 0..130 (partial blocks), scales 1e-44..1e38 (subnormals to overflow), eb 1e-44..1e37,
# NaN (with payloads) / ±Inf / -0.0 / subnormals / FLT_MAX, all-zero, empty, scalar.
_RANDOM_CASES = given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 130),
                      kind=st.sampled_from(["normal", "relu", "smooth", "const", "near_half"]),
                      log_scale=st.floats(-44, 38), log_eb=st.floats(-44, 37),
                      special_frac=st.sampled_from([0.0, 0.0, 0.02, 0.3]),
                      zero_frac=st.sampled_from([0.0, 0.5, 0.95]), as_scalar=st.booleans())


@settings(max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_RANDOM_CASES
def test_error_bound_property(seed: int, n: int, kind: str, log_scale: float, log_eb: float, special_frac: float,
                              zero_frac: float, as_scalar: bool) -> None:
    """2,000 random cases per backend in the default run (4–6 s each here); ``-m slow`` runs 10^4."""
    x, eb = _make_case(seed, n, kind, log_scale, log_eb, special_frac, zero_frac, as_scalar)
    _check_round_trip(x, eb)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_RANDOM_CASES
def test_error_bound_property_10k(seed: int, n: int, kind: str, log_scale: float, log_eb: float,
                                  special_frac: float, zero_frac: float, as_scalar: bool) -> None:
    """>= 10^4 random cases per backend."""
    x, eb = _make_case(seed, n, kind, log_scale, log_eb, special_frac, zero_frac, as_scalar)
    _check_round_trip(x, eb)


@settings(max_examples=500, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)),
       st.floats(min_value=1e-40, max_value=1e30, allow_subnormal=False))
def test_error_bound_adversarial_values(x: np.ndarray, eb: float) -> None:
    """Hypothesis-chosen float32 values (it favours edge cases: -0.0, subnormals, FLT_MAX, NaN, Inf)."""
    _check_round_trip(x, eb)


def test_float32_rounding_violations_become_outliers() -> None:
    # |x| ~ 1e4 has a float32 spacing of ~1e-3 > 2·eb: 2·eb·q often rounds outside the bound; the check
    # must catch every one (stored as outliers), not just the NaN/Inf ones.
    x = (np.random.default_rng(0).standard_normal(20_000) * 1e4).astype(np.float32)
    payload, y = _check_round_trip(x, 1e-4)
    idx = payload[3]
    assert idx.size > 0 and np.isfinite(x[idx]).all()
    np.testing.assert_array_equal(y[idx], x[idx])
    assert np.all(np.diff(idx) > 0)  # ascending


# -- specials ------------------------------------------------------------------------------------------------
def test_specials_exact() -> None:
    x = np.concatenate([_SPECIALS, _NAN_PAYLOAD, np.float32([1.0, -2.0, 0.3])])
    _, y = _check_round_trip(x, 1e-3)
    assert not np.signbit(y[x == 0]).any()  # -0.0 decodes to +0.0 (same value, error 0)


@pytest.mark.parametrize("shape", [(0,), (4, 0, 3), ()])
def test_empty_and_scalar(shape: tuple[int, ...]) -> None:
    x = np.full(shape, 1.25, dtype=np.float32)
    payload, y = _check_round_trip(x, 0.01)
    assert tuple(payload[5]) == shape
    if x.size == 0:
        assert SZ.payload_nbytes(payload) == sz.HEADER_BYTES + 8 * len(shape)


def test_all_zero_blocks_cost_only_their_rate_byte() -> None:
    x = np.zeros((5, 64), np.float32)
    payload, y = _check_round_trip(x, 1e-3)
    header, rates, data, idx, obits, shape = payload
    assert rates.tolist() == [0] * 10 and data.size == 0 and idx.size == 0
    assert SZ.payload_nbytes(payload) == 16 + 10 + 8 * 2
    x[1, 40] = 0.5  # one nonzero: only block 3 (elements 96..127) pays; 0.5 / 2e-3 = 250 -> 8 bits
    header, rates, data, idx, obits, shape = SZ.encode(x, eb=1e-3)
    assert rates.tolist() == [0, 0, 0, 8, 0, 0, 0, 0, 0, 0] and data.size == 4 * (8 + 1)


def test_relu_activation_compresses() -> None:
    x = np.maximum(np.random.default_rng(0).standard_normal((8, 16, 32, 32)), 0).astype(np.float32)
    payload, _ = _check_round_trip(x, 1e-2)
    assert x.nbytes / SZ.payload_nbytes(payload) > 3.0


# -- the bitstream -------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 200), log_eb=st.floats(-6, 2),
       special_frac=st.sampled_from([0, 0.05]))
def test_bytes_match_reference_encoder(seed: int, n: int, log_eb: float, special_frac: float) -> None:
    x, eb = _make_case(seed, n, "smooth", 0.0, log_eb, special_frac, 0.3, False)
    header, rates, data, idx, obits, _ = SZ.encode(x, eb=eb)
    ref_rates, ref_data, ref_idx, ref_bits = reference_encode(x, eb)
    assert rates.tobytes() == ref_rates
    assert data.tobytes() == ref_data
    assert idx.tolist() == ref_idx and obits.tolist() == ref_bits


def test_header_layout_and_eb_stored() -> None:
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    header = SZ.encode(x, eb=0.0123)[0]
    assert header.tobytes() == b"SZ\x01\x00" + (32).to_bytes(4, "little") + struct.pack("<d", 0.0123)
    assert sz.parse_header(header) == (0.0123, 0)
    assert sz.parse_header(SZ.encode(x, eb=0.0123, zstd_level=3)[0]) == (0.0123, sz.FLAG_ZSTD)


def test_decode_needs_no_params_and_ignores_them() -> None:
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    for eb in (1e-4, 1e-2, 0.5):  # the bound can change per call without touching decode
        payload = SZ.encode(x, eb=eb)
        y = SZ.decode(payload)
        np.testing.assert_array_equal(SZ.decode(payload, eb=123.0, zstd_level=9), y)
        assert np.abs(x.astype(np.float64) - y).max() <= eb


def test_cpu_bytes_deterministic_and_chunking_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    x = np.maximum(rng.standard_normal(3 * sz._CHUNK_BLOCKS * sz.BLOCK + 77), 0).astype(np.float32)
    x[rng.random(x.size) < 1e-4] = np.nan
    a = SZ.encode(x, eb=1e-3)
    b = SZ.encode(x.copy(), eb=1e-3)
    for p, q in zip(a, b):
        assert p.dtype == q.dtype and p.tobytes() == q.tobytes()
    monkeypatch.setattr(sz, "_CHUNK_BLOCKS", 3)  # chunk boundaries everywhere: same bytes, same decode
    c = SZ.encode(x, eb=1e-3)
    for p, q in zip(a, c):
        assert p.tobytes() == q.tobytes()
    np.testing.assert_array_equal(SZ.decode(a), SZ.decode(c))
    _check_round_trip(x, 1e-3)


# -- zstd ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", [1, 3, 19, -1])
def test_zstd_round_trip_same_values(level: int) -> None:
    x = np.maximum(np.random.default_rng(1).standard_normal((4, 8, 16, 16)), 0).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    plain = SZ.encode(x, eb=1e-2)
    packed, y = _check_round_trip(x, 1e-2, zstd_level=level)
    np.testing.assert_array_equal(y, SZ.decode(plain))
    assert packed[1].nbytes < plain[1].nbytes  # the rate bytes are very compressible


# -- sizes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,eb", [("relu", 1e-2), ("normal", 1e-4), ("smooth", 1e-3), ("const", 1e-3)])
def test_predicted_nbytes_exact_from_measured_stats(kind: str, eb: float) -> None:
    x, _ = _make_case(7, 5000, kind, 0.0, 0.0, 0.01, 0.3, False)
    stats = sz.sz_stats(x, eb)
    assert SZ.predicted_nbytes(x.shape, **stats) == SZ.payload_nbytes(SZ.encode(x, eb=eb))


def test_predicted_nbytes_from_density() -> None:
    shape = (4, 1024)
    # every block nonzero at density 1; (1 - 0.5)^32 ~ 0 zero blocks at density 0.5
    assert SZ.predicted_nbytes(shape, mean_rate=7, density=1.0) == 16 + 128 + 128 * 4 * 8 + 16
    assert SZ.predicted_nbytes(shape, mean_rate=7, density=0.0) == 16 + 128 + 16
    assert SZ.predicted_nbytes(shape, mean_rate=7) == SZ.predicted_nbytes(shape, mean_rate=7, density=1.0)
    with pytest.raises(TypeError, match="mean_rate"):
        SZ.predicted_nbytes(shape, density=0.5)
    with pytest.raises(ValueError):
        SZ.predicted_nbytes(shape, mean_rate=40)


# -- bad input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params,match", [
    ({}, "needs eb"), ({"eb": 0.0}, "eb must be"), ({"eb": -1e-3}, "eb must be"), ({"eb": float("nan")}, "eb must be"),
    ({"eb": float("inf")}, "eb must be"), ({"eb": 1e308}, "eb must be"), ({"eb": "x"}, "eb must be"),
    ({"eb": 1e-3, "bound": 1}, "unknown params"), ({"eb": 1e-3, "zstd_level": 0}, "zstd_level"),
    ({"eb": 1e-3, "zstd_level": 2.5}, "zstd_level"), ({"eb": 1e-3, "zstd_level": 99}, "zstd_level"),
])
def test_bad_params(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SZ.encode(np.ones(4, np.float32), **params)


def test_bad_dtype() -> None:
    with pytest.raises(ValueError, match="float32"):
        SZ.encode(np.ones(4, np.float64), eb=1e-3)


def test_corrupt_payloads_rejected() -> None:
    x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    header, rates, data, idx, obits, shape = SZ.encode(x, eb=1e-3)
    idx2, obits2 = np.array([5], np.int64), np.array([0], np.uint32)
    bad = {
        "magic": (np.zeros(16, np.uint8), rates, data, idx, obits, shape),
        "version": (np.concatenate([header[:2], [9], header[3:]]).astype(np.uint8), rates, data, idx, obits, shape),
        "flags": (np.concatenate([header[:3], [0x80], header[4:]]).astype(np.uint8), rates, data, idx, obits, shape),
        "rates": (header, rates[:-1], data, idx, obits, shape),
        "width": (header, np.full_like(rates, 32), data, idx, obits, shape),
        "data": (header, rates, data[:-4], idx, obits, shape),
        "outliers": (header, rates, data, idx2, np.zeros(0, np.uint32), shape),
        "index": (header, rates, data, idx2 + 1000, obits2, shape),
        "arity": (header, rates, data, idx, obits),
        "zstd": (sz.make_header(1e-3, sz.FLAG_ZSTD), rates, data, idx, obits, shape),
    }
    for what, payload in bad.items():
        with pytest.raises(ValueError, match="sz"):
            SZ.decode(payload)


# -- GPU -----------------------------------------------------------------------------------------------------
def _gpu_cases() -> list[tuple[np.ndarray, float]]:
    rng = np.random.default_rng(11)
    cases = [(x, p["eb"]) for x, p in SZ.sample_inputs(rng)]
    for seed in range(6):
        kind = ["normal", "relu", "smooth", "near_half", "const", "relu"][seed]
        x, eb = _make_case(seed, int(rng.integers(1, 5000)), kind, float(rng.uniform(-3, 3)),
                           float(rng.uniform(-5, 0)), 0.01, 0.4, False)
        cases.append((x, eb))
    big = np.maximum(rng.standard_normal((3, 64, 33, 35)), 0).astype(np.float32)
    cases += [(big, 1e-2), (big * 1e4, 1e-4)]
    return cases


@pytest.mark.gpu
def test_gpu_bytes_match_cpu_and_cross_decode() -> None:
    cp = cupy_or_skip()
    for x, eb in _gpu_cases():
        cpu = SZ.encode(x, eb=eb)
        gpu_payload = SZ.encode(cp.asarray(x), eb=eb)
        for name, c, g in zip(SZ.payload_names, cpu, gpu_payload):
            assert isinstance(g, cp.ndarray) and g.dtype == c.dtype, name
            np.testing.assert_array_equal(cp.asnumpy(g), c, err_msg=name)
        want = SZ.decode(cpu)
        np.testing.assert_array_equal(cp.asnumpy(SZ.decode(gpu_payload)), want)
        np.testing.assert_array_equal(cp.asnumpy(SZ.decode(tuple(cp.asarray(p) for p in cpu))), want)
        np.testing.assert_array_equal(SZ.decode(tuple(cp.asnumpy(p) for p in gpu_payload)), want)


@pytest.mark.gpu
def test_gpu_zstd() -> None:
    cp = cupy_or_skip()
    pytest.importorskip("zstandard")  # not on the GPU machine
    x = np.maximum(np.random.default_rng(2).standard_normal(5000), 0).astype(np.float32)
    with pytest.raises(ValueError, match="CPU-only"):
        SZ.encode(cp.asarray(x), eb=1e-3, zstd_level=3)
    packed = SZ.encode(x, eb=1e-3, zstd_level=3)  # a zstd payload still decodes on the GPU (host inflate)
    np.testing.assert_array_equal(cp.asnumpy(SZ.decode(tuple(cp.asarray(p) for p in packed))), SZ.decode(packed))


# -- tools ---------------------------------------------------------------------------------------------------
def _tool(name: str) -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_tool_smoke(tmp_path: Any) -> None:
    pytest.importorskip("pysz")
    rng = np.random.default_rng(0)
    acts = tmp_path / "acts"
    acts.mkdir()
    x = np.maximum(rng.standard_normal((2, 8, 16, 16)), 0).astype(np.float32)
    np.save(acts / "a.npy", x)
    np.save(acts / "a_copy.npy", x)  # identical tensors are benchmarked once
    assert _tool("bench_sz").main(["--dir", str(acts), "--min-mib", "0", "--repeat", "1", "--rel", "1e-2",
                                   "--abs", "1e-3", "--out", str(tmp_path / "out")]) == 0
    import json

    rows = json.loads((tmp_path / "out" / "bench.json").read_text())["rows"]
    assert {r["method"] for r in rows} == {"sz", "sz+zstd3", "sz+huff*", "SZ3", "zstd3 (lossless)"}
    assert len(rows) == 2 * 5 and all(r["bound_ok"] in (True, None) for r in rows)
    assert (tmp_path / "out" / "tables.md").read_text().startswith("## Summary")


@pytest.mark.slow
def test_dump_activations_tool(tmp_path: Any) -> None:
    _tool("dump_activations").main(["--model", "resnet18", "--image", "32", "--batch", "16", "--dump-batch", "8",
                                    "--steps", "2", "--layers", "2", "--out", str(tmp_path)])
    files = sorted(p.name for p in tmp_path.glob("*.npy"))
    assert any("relu_in" in f for f in files) and any("relu_out" in f for f in files)
    assert any("conv_in" in f for f in files)
    relu_out = np.load(next(tmp_path.glob("*relu_out.npy")))
    assert relu_out.dtype == np.float32 and relu_out.min() >= 0 and relu_out.shape[0] == 8
