"""The ``zfp`` fixed-rate codec: fixed size per block (random access), the bitstream on a hand-worked block,
the NumPy coder against the compiled (numba) one bit for bit, specials, odd/empty/all-zero shapes, error vs
rate, the ORT PyOps, and GPU == CPU words (skipped without CuPy + a GPU)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import cupy_or_skip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import get_codec

ZFP = get_codec("zfp")
F32_MAX = float(np.finfo(np.float32).max)
_SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1.1754942e-38, F32_MAX, -F32_MAX],
                     dtype=np.float32)
_NAN_PAYLOAD = np.array([0x7FC00001, 0xFFC12345, 0x7F800001], dtype=np.uint32).view(np.float32)


def _round_trip(x: np.ndarray, rate: int) -> tuple[Any, np.ndarray]:
    """Encode/decode (decode with no params) and assert every guarantee that holds at any rate."""
    payload = ZFP.encode(x, rate=rate)
    assert len(payload) == len(ZFP.payload_names)
    for arr, dt in zip(payload, ZFP.payload_dtypes):
        assert arr.dtype == np.dtype(dt)
    y = ZFP.decode(payload)
    assert y.dtype == np.float32 and y.shape == x.shape
    xf, yf = x.reshape(-1), y.reshape(-1)
    finite = np.isfinite(xf)
    assert np.isfinite(yf[finite]).all()  # finite in, finite out (saturated at ±FLT_MAX)
    np.testing.assert_array_equal(yf.view(np.uint32)[~finite], xf.view(np.uint32)[~finite])  # exact bits
    n_special = int((~finite).sum())
    assert ZFP.payload_nbytes(payload) == ZFP.predicted_nbytes(x.shape, rate=rate,
                                                               outlier_fraction=n_special / max(x.size, 1))
    return payload, y


def _numpy_coder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zfp, "USE_NUMBA", False)


# -- layout and size -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,expected", [
    ((2, 3, 5, 7), zfp.Layout(6, 5, 7, 4, 4)), ((4, 6, 1, 1), zfp.Layout(1, 4, 6, 4, 4)),
    ((1, 8, 1, 9), zfp.Layout(1, 8, 9, 4, 4)), ((7,), zfp.Layout(1, 1, 7, 1, 4)), ((), zfp.Layout(1, 1, 1, 1, 4)),
    ((1, 1, 5), zfp.Layout(1, 1, 5, 1, 4)), ((0, 4), zfp.Layout(0, 0, 0, 4, 4)), ((0,), zfp.Layout(0, 1, 0, 1, 4)),
])
def test_layout(shape: tuple[int, ...], expected: zfp.Layout) -> None:
    assert zfp.layout_of(shape) == expected


@pytest.mark.parametrize("rate", [3, 4, 6, 8, 12, 16, 32])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 33), (13,), (4, 6, 1, 1), ()])
def test_size_depends_only_on_shape_and_rate(shape: tuple[int, ...], rate: int) -> None:
    rng = np.random.default_rng(rate)
    sizes = {ZFP.payload_nbytes(ZFP.encode(x.astype(np.float32), rate=rate))
             for x in (rng.standard_normal(shape), np.zeros(shape), rng.standard_normal(shape) * 1e30)}
    layout = zfp.layout_of(shape)
    bits = layout.nblocks * rate * layout.block_size
    assert sizes == {zfp.HEADER_BYTES + 4 * -(-bits // 32) + 8 * len(shape)}


# -- the bitstream ---------------------------------------------------------------------------------------
def test_hand_worked_block() -> None:
    # [1,1,1,1] (1-D, rate 8, budget 32): emax 1 (field 150), q = 2^25, lifting -> (2^25, 0, 0, 0): bit length
    # 26, e0 = 27 - 26 = 1, D0 = 26. avail = 32 - 11 = 21: 4 * (27 - s) <= 21 -> s = 22, widths 5 (20 bits),
    # one bit left over -> coefficient 0 gets 6 bits at step 2^21: r = (2^25 + 2^20) >> 21 = 16; the others 0.
    payload = ZFP.encode(np.ones(4, np.float32), rate=8)
    assert payload[1].tolist() == [150 | 1 << 9 | 16 << 11]
    np.testing.assert_array_equal(ZFP.decode(payload), np.ones(4, np.float32))
    assert payload[0].tobytes() == b"ZF\x03\x08\x00\x00\x00\x00"


def test_old_versions_rejected_with_a_clear_error() -> None:
    header, *rest = ZFP.encode(np.ones((4, 4), np.float32), rate=8)
    for old in (1, 2):
        stale = header.copy()
        stale[2] = old
        with pytest.raises(ValueError, match=f"version {old} .*re-encoded"):
            ZFP.decode((stale, *rest))


def test_transform_range_and_inverse() -> None:
    """|coefficient| <= 2**LCAP for |q| < 2**PRECISION (the widths assume it); the inverse undoes the forward
    lifting up to the low bits it drops; and the inverse of ANY coefficients within the bound stays inside
    int32 (the compiled and CUDA decoders run it in 32 bits, also on corrupt streams)."""
    rng = np.random.default_rng(0)
    m = (1 << zfp.PRECISION) - 1
    signs = ((np.arange(1 << 16)[:, None] >> np.arange(16)) & 1) * 2 - 1  # every sign pattern of a 4x4 block
    q = np.concatenate([rng.integers(-m, m + 1, size=(5000, 16)), signs * m, -signs * (m - 1)]).astype(np.int64)
    for two_d, width in ((True, 16), (False, 4)):
        c = zfp.forward_transform(q[:, :width], two_d)
        assert np.abs(c).max() <= 1 << zfp.LCAP
        back = zfp.inverse_transform(c, two_d)
        assert np.abs(back - q[:, :width]).max() <= 8
        extreme = zfp.inverse_transform(signs[:, :width] * (1 << zfp.LCAP), two_d)
        assert np.abs(extreme).max() < 1 << 31


def test_declared_bounds_and_widths_fit_the_budget() -> None:
    rng = np.random.default_rng(1)
    m = (1 << zfp.PRECISION) - 1
    for two_d, width in ((True, 16), (False, 4)):
        c = rng.integers(-m, m + 1, size=(3000, width)) >> rng.integers(0, 27, size=(3000, width))
        c = zfp.forward_transform(c, two_d)[:, zfp.PERM_2D if two_d else zfp.PERM_1D]
        fields, D = zfp.declared_bounds(c, two_d)
        assert fields.min() >= 0 and fields.max() <= 3
        np.testing.assert_array_equal(zfp.bounds_from_fields(fields), D)
        of = np.repeat(np.arange(len(zfp.groups(two_d))), zfp.groups(two_d))
        assert (np.abs(c) <= (1 << D[:, of])).all()
        assert (np.diff(D, axis=1) <= 0).all()
        for rate in (zfp.MIN_RATE, 5, 8, 16, zfp.MAX_RATE):
            budget = rate * width
            w, t = zfp.widths_and_steps(D, two_d, budget)
            assert (w.sum(axis=1) <= budget - zfp.header_bits(two_d)).all() and (t >= 0).all()
            assert ((w + t == D[:, of] + 1) | (w == 0)).all()  # a field spans its group's bound exactly
            # rounding to w bits at step 2**t loses at most half a step (or saturates at the top of the range)
            r = np.clip((c + ((1 << t) >> 1)) >> t, -(1 << np.maximum(w - 1, 0)), (1 << np.maximum(w - 1, 0)) - 1)
            err = np.abs(np.where(w > 0, r << t, 0) - c)
            assert (err[w > 0] <= (1 << t[w > 0])).all()


def _assert_compiled_matches_numpy(x: np.ndarray, rate: int) -> None:
    """Every payload the compiled coder writes, and every value it decodes, equal to the NumPy coder's."""
    compiled = ZFP.encode(x, rate=rate)
    zfp.USE_NUMBA = False
    try:
        vectorised = ZFP.encode(x, rate=rate)
        y_vec = ZFP.decode(compiled)
    finally:
        zfp.USE_NUMBA = True
    for name, a, b in zip(ZFP.payload_names, compiled, vectorised):
        np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_array_equal(ZFP.decode(compiled).view(np.uint32), y_vec.view(np.uint32))


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), shape=st.lists(st.integers(0, 11), min_size=0, max_size=4).map(tuple),
       rate=st.integers(zfp.MIN_RATE, zfp.MAX_RATE), log_scale=st.floats(-44, 38),
       special_frac=st.sampled_from([0.0, 0.05]), zero_frac=st.sampled_from([0.0, 0.5]))
def test_numpy_and_compiled_coders_write_the_same_words(seed: int, shape: tuple[int, ...], rate: int,
                                                       log_scale: float, special_frac: float,
                                                       zero_frac: float) -> None:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        x = np.asarray(rng.standard_normal(shape) * 10.0 ** log_scale, dtype=np.float32)
    x[np.asarray(rng.random(shape) < zero_frac)] = 0
    x[np.asarray(rng.random(shape) < special_frac)] = np.nan
    _assert_compiled_matches_numpy(x, rate)


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("rate", [3, 5, 8, 13, 32])
@pytest.mark.parametrize("shape", [(2, 3, 37, 45), (3 * 1024 + 7,)])
def test_compiled_coder_matches_numpy_across_tasks(shape: tuple[int, ...], rate: int) -> None:
    """Several parallel tasks of the compiled coder (zfp._zfp_numba.G blocks each), odd rates (1-D blocks
    then start mid-word), edge-padded blocks, and magnitudes from subnormal to huge: every stream word and
    every decoded value equal to the NumPy coder's. The run-at-a-time coder cuts planes at the budget in the
    middle of a run, which small tensors rarely hit at every rate."""
    rng = np.random.default_rng(rate)
    n = int(np.prod(shape))
    scale = 10.0 ** rng.uniform(-44, 37, size=n)
    x = np.asarray(np.maximum(rng.standard_normal(n), -0.2) * scale, dtype=np.float32).reshape(shape)
    x.reshape(-1)[rng.random(n) < 0.3] = 0.0
    _assert_compiled_matches_numpy(x, rate)


def _blocky(rng: np.random.Generator, shape: tuple[int, ...], log2_scales: np.ndarray) -> np.ndarray:
    """float32 of ``shape`` whose values carry a scale 2**e drawn from ``log2_scales`` per run of 16 elements
    (so blocks mix magnitudes), with zeros, ±0.0 and a few subnormals."""
    n = int(np.prod(shape))
    e = rng.choice(log2_scales, size=-(-n // 16)).repeat(16)[:n]
    x = (rng.uniform(0.5, 1.0, n) * np.where(rng.random(n) < 0.5, -1, 1) * np.exp2(e.astype(np.float64)))
    x[rng.random(n) < 0.1] = 0.0
    x[rng.random(n) < 0.05] = -0.0
    sub = rng.random(n) < 0.02
    x[sub] = rng.integers(1, 2**20, size=int(sub.sum())) * 2.0 ** -149  # subnormal float32 values
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).reshape(shape)


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("rate", [4, 5, 6, 8, 12, 16])
@pytest.mark.parametrize("shape", [(3, 5, 45, 38), (2, 130, 3), (1, 2, 1030), (600, 4), (2, 3, 1, 7), (3, 7),
                                   (4 * 128 * 2 + 3,), (9,)])
def test_compiled_coder_edge_layouts(shape: tuple[int, ...], rate: int) -> None:
    """The compiled coder's gather / scatter: runs along block rows that end mid-task, cross planes and task
    boundaries (zfp._zfp_numba.G blocks), partial last block columns and rows (w, h not multiples of 4, and
    < 4), block rows longer than a task, 1-D tails; the word stores of every rate's word count."""
    rng = np.random.default_rng(len(shape) * 100 + rate)
    x = _blocky(rng, shape, np.arange(-30, 30))
    _assert_compiled_matches_numpy(x, rate)


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("emaxes", [(-100, 122), (-101, -100, 0), (122, 123), (-148, -120, -101), (128, 127, 5)])
@pytest.mark.parametrize("rate", [8, 16, 32])
def test_compiled_decoder_float32_path_at_its_limits(emaxes: tuple[int, ...], rate: int) -> None:
    """The compiled decoder scales in float32 where every block of a task has emax in [-100, 122] (no value can
    be subnormal or overflow there) and in float64 otherwise: blocks at and just past both limits, alone and
    mixed in one task, decode bit-identically to the NumPy coder (float64 throughout)."""
    rng = np.random.default_rng(rate + 7 * len(emaxes))
    x = _blocky(rng, (3, 4, 4 * 48), np.array(emaxes) - 1)  # |x| in [2**(e-2), 2**(e-1)): frexp exponent e - 1..e
    _assert_compiled_matches_numpy(x, rate)
    for e in emaxes:  # one magnitude per tensor: whole tasks on one path
        _assert_compiled_matches_numpy(_blocky(rng, (2, 8, 64), np.array([e - 1])), rate)


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("rate", [3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("shape", [(2, 3, 37, 45), (3 * 128 * 4 + 5,), (5, 6)])
def test_compiled_encoder_writes_every_word(shape: tuple[int, ...], rate: int) -> None:
    """zfp.py hands the compiled encoder an uninitialised (np.empty) word array: every word must be written,
    also the words that odd rates share between blocks and the last partial word; and it relies on the
    kernel's report of NaN / ±Inf (one anywhere in the tensor) instead of scanning x itself."""
    from onnxcomp.custom_ops import _zfp_numba

    x = _blocky(np.random.default_rng(rate), shape, np.arange(-10, 10)).reshape(-1)
    lay = zfp.layout_of(shape)
    out = []
    args = (lay.height, lay.width, lay.nblocks, lay.two_d, rate, zfp.PRECISION, zfp.EXP_BITS, zfp.EXP_BIAS)
    for fill in (0, 0xFFFFFFFF, 0x5A5A5A5A):
        words = np.full(zfp.data_words(lay, rate), fill, dtype=np.uint32)
        assert _zfp_numba.encode(x, x.size, *args, words, 0, 1 << 62)  # True: no NaN / Inf met
        out.append(words)
    for special in (np.nan, np.inf, -np.inf):  # the kernel reports them (zfp.py then re-encodes them zeroed)
        y = x.copy()
        y[x.size // 2] = special
        assert not _zfp_numba.encode(y, y.size, *args, np.empty_like(words), 0, 1 << 62)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[0], ZFP.encode(x.reshape(shape), rate=rate)[1])


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), rate=st.integers(zfp.MIN_RATE, zfp.MAX_RATE),
       log_scale=st.floats(-44, 38), two_d=st.booleans())
def test_many_random_tensors_coders_agree(seed: int, n: int, rate: int, log_scale: float, two_d: bool) -> None:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        x = np.asarray(rng.standard_normal(n) * 10.0 ** log_scale, dtype=np.float32)
    x[rng.random(n) < 0.02] = np.inf
    if two_d and n % 3 == 0 and n:
        x = x.reshape(3, n // 3)
    payload, y = _round_trip(x, rate)
    if zfp.USE_NUMBA:
        zfp.USE_NUMBA = False
        try:
            np.testing.assert_array_equal(ZFP.encode(x, rate=rate)[1], payload[1])
            np.testing.assert_array_equal(ZFP.decode(payload).view(np.uint32), y.view(np.uint32))
        finally:
            zfp.USE_NUMBA = True


def test_chunking_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    _numpy_coder(monkeypatch)
    rng = np.random.default_rng(5)
    for shape, rate in (((2, 3, 9, 11), 7), ((203,), 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        a = ZFP.encode(x, rate=rate)
        monkeypatch.setattr(zfp, "_CHUNK_BLOCKS", 3)  # chunk boundaries everywhere (mid-plane for 1-D)
        b = ZFP.encode(x, rate=rate)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(ZFP.decode(a), ZFP.decode(b))
        monkeypatch.setattr(zfp, "_CHUNK_BLOCKS", 8192)


def test_random_access_each_block_owns_its_bits() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 9, 10)).astype(np.float32)  # 2 planes x 3 x 3 blocks, partial edges
    rate = 5                                                 # 80 bits per block: blocks straddle words
    header, data, idx, obits, shape = ZFP.encode(x, rate=rate)
    y = ZFP.decode((header, data, idx, obits, shape))
    budget = rate * 16
    block = 7  # plane 0, block row 2, block col 1 -> rows 8, cols 4..7
    bits = np.unpackbits(data.view(np.uint8), bitorder="little")
    bits[block * budget + zfp.EXP_BITS:(block + 1) * budget] ^= 1  # scramble everything after its exponent
    damaged = np.packbits(bits, bitorder="little").view(np.uint32)
    y2 = ZFP.decode((header, damaged, idx, obits, shape))
    changed = np.argwhere(y2 != y)
    assert changed.size
    assert {(int(p), int(r) // 4, int(c) // 4) for p, r, c in changed} == {(0, 2, 1)}


# -- values ----------------------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)),
       st.integers(zfp.MIN_RATE, zfp.MAX_RATE))
def test_round_trip_adversarial_values(x: np.ndarray, rate: int) -> None:
    """Hypothesis-chosen values (-0.0, subnormals, FLT_MAX, NaN, Inf), odd and empty shapes, any rate."""
    _round_trip(x, rate)


def test_specials_exact_and_neighbours_unharmed() -> None:
    x = np.concatenate([_SPECIALS, _NAN_PAYLOAD, np.float32([1.0, -2.0, 0.3])])
    payload, y = _round_trip(x, 16)
    assert payload[2].tolist() == np.flatnonzero(~np.isfinite(x)).tolist()
    finite = np.isfinite(x)
    assert np.all(np.abs(y[finite][-3:] - x[finite][-3:]) < 1e-3)
    assert not np.signbit(y[x == 0]).any()  # exact zeros (either sign) come back as +0.0


@pytest.mark.parametrize("shape", [(0,), (4, 0, 3), (), (1, 1, 1), (3, 1, 5)])
def test_empty_scalar_and_singleton_shapes(shape: tuple[int, ...]) -> None:
    x = np.full(shape, 1.25, dtype=np.float32)
    payload, y = _round_trip(x, 8)
    assert tuple(payload[4]) == shape
    np.testing.assert_array_equal(y, x)  # constant blocks are exact (DC coefficient only)


def test_all_zero_blocks_exact_and_cost_no_more() -> None:
    x = np.zeros((2, 3, 8, 8), np.float32)
    payload, y = _round_trip(x, 6)
    assert not payload[1].any() and not y.any()
    x[1, 2, 5, 6] = 0.5  # one block (the last) becomes nonzero; the others stay exactly zero
    _, y = _round_trip(x, 6)
    assert np.count_nonzero(y[:, :, :4]) == 0 and np.count_nonzero(y[:1]) == 0


def test_saturates_near_float32_max() -> None:
    x = np.full((4, 4), F32_MAX, np.float32)
    x[0, 0] = -F32_MAX
    _, y = _round_trip(x, 4)
    assert np.isfinite(y).all() and np.abs(y).max() <= F32_MAX


def test_error_falls_with_rate() -> None:
    rng = np.random.default_rng(3)
    acts = np.maximum(rng.standard_normal((4, 8, 20, 20)), 0).astype(np.float32)
    smooth = np.cumsum(np.cumsum(rng.standard_normal((4, 8, 20, 20)), -1), -2).astype(np.float32)
    for x in (acts, smooth):
        rms = [float(np.sqrt(np.mean((ZFP.decode(ZFP.encode(x, rate=r)) - x) ** 2))) for r in (4, 6, 8, 12, 16, 24)]
        assert all(b < a / 2 for a, b in zip(rms, rms[1:])), rms  # every extra bit per value pays
        assert rms[-2] < 1e-3 * float(np.abs(x).max())


def test_close_to_reference_zfp_at_equal_rate() -> None:
    zfpy = pytest.importorskip("zfpy")
    rng = np.random.default_rng(4)
    x = np.maximum(rng.standard_normal((16, 32, 32)), 0).astype(np.float32)
    for rate in (4, 8, 16):
        ours = np.sqrt(np.mean((ZFP.decode(ZFP.encode(x, rate=rate)) - x) ** 2))
        plane = x.reshape(-1, 32)  # zfpy's 2-D mode: the same 4x4 blocks
        ref = np.sqrt(np.mean((zfpy.decompress_numpy(zfpy.compress_numpy(plane, rate=rate)) - plane) ** 2))
        assert ours < 1.5 * ref, (rate, ours, ref)


# -- bad input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params,match", [
    ({}, "needs rate"), ({"rate": 2}, r"\[3, 32\]"), ({"rate": 33}, r"\[3, 32\]"), ({"rate": 8.5}, "integer"),
    ({"rate": "8"}, "integer"), ({"rate": True}, "integer"), ({"rate": 8, "eb": 1}, "unknown params"),
])
def test_bad_params(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ZFP.encode(np.ones(4, np.float32), **params)


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("rate", [3, 8, 13, 32])
@pytest.mark.parametrize("shape", [(3, 37, 45), (1031,)])
def test_compiled_decoder_matches_numpy_on_random_words(shape: tuple[int, ...], rate: int) -> None:
    """Random stream words (any header fields, any coefficients up to their bounds; exponent fields kept in
    range): the compiled decoder's int32 inverse lifting gives the NumPy decoder's (int64) values bit for bit."""
    rng = np.random.default_rng(rate)
    header, data, idx, obits, shp = ZFP.encode(np.ones(shape, np.float32), rate=rate)
    words = rng.integers(0, 1 << 32, size=data.size, dtype=np.uint64).astype(np.uint32)
    layout = zfp.layout_of(shape)
    budget = zfp.budget_bits(layout, rate)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    for b in range(layout.nblocks):  # exponent fields into 0..277 (the decoder rejects larger ones)
        e = int(rng.integers(0, 128 + zfp.EXP_BIAS + 1))
        bits[b * budget:b * budget + zfp.EXP_BITS] = (e >> np.arange(zfp.EXP_BITS)) & 1
    words = np.packbits(bits, bitorder="little").view(np.uint32)
    payload = (header, words, idx, obits, shp)
    compiled = ZFP.decode(payload)
    zfp.USE_NUMBA = False
    try:
        vectorised = ZFP.decode(payload)
    finally:
        zfp.USE_NUMBA = True
    np.testing.assert_array_equal(compiled.view(np.uint32), vectorised.view(np.uint32))


def test_bad_dtype_and_corrupt_payloads() -> None:
    with pytest.raises(ValueError, match="float32"):
        ZFP.encode(np.ones(4, np.float64), rate=8)
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    x[0, 0] = np.nan
    header, data, idx, obits, shape = ZFP.encode(x, rate=8)
    bad_exp = data.copy()
    bad_exp[0] |= np.uint32(0x1FF)  # exponent field 511
    bad = {
        "magic": (np.zeros(8, np.uint8), data, idx, obits, shape),
        "version": (np.concatenate([header[:2], [9], header[3:]]).astype(np.uint8), data, idx, obits, shape),
        "rate": (np.concatenate([header[:3], [40], header[4:]]).astype(np.uint8), data, idx, obits, shape),
        "data": (header, data[:-1], idx, obits, shape),
        "outliers": (header, data, idx, obits[:0], shape),
        "index": (header, data, idx + 1000, obits, shape),
        "exponent": (header, bad_exp, idx, obits, shape),
        "arity": (header, data, idx, obits),
    }
    for what, payload in bad.items():
        with pytest.raises(ValueError, match="zfp"):
            ZFP.decode(payload)


# -- ONNX Runtime ----------------------------------------------------------------------------------------
def test_encode_decode_ops_run_in_an_ort_session() -> None:
    import onnxruntime as ort
    from onnx import TensorProto, ValueInfoProto, helper

    from onnxcomp.runtime import codec_ops
    from onnxcomp.runtime.session import session_options

    enc, dec = codec_ops.op_type_names("zfp")
    payload = [f"p_{n}" for n in ZFP.payload_names]
    attr = codec_ops.params_attr({"rate": 6})
    nodes = [helper.make_node(enc, ["X"], [*payload, "anchor"], domain=codec_ops.DOMAIN, params=attr),
             helper.make_node(dec, [*payload, "trigger"], ["Y"], domain=codec_ops.DOMAIN, params=attr)]
    x = np.maximum(np.random.default_rng(1).standard_normal((2, 3, 9, 10)), 0).astype(np.float32)
    x[0, 0, 0, 0] = np.inf
    graph = helper.make_graph(nodes, "zfp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape)),
                                             helper.make_tensor_value_info("trigger", TensorProto.FLOAT, [1])],
                              [ValueInfoProto(name=n) for n in ["Y", "anchor", "p_data"]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(codec_ops.DOMAIN, 1)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
    y, anchor, data = sess.run(["Y", "anchor", "p_data"], {"X": x, "trigger": np.zeros(1, np.float32)})
    want = ZFP.encode(x, rate=6)
    np.testing.assert_array_equal(data, want[1])
    np.testing.assert_array_equal(y, ZFP.decode(want))
    assert tuple(anchor) == x.shape and y[0, 0, 0, 0] == np.inf


# -- GPU -------------------------------------------------------------------------------------------------
def _gpu_cases() -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(11)
    cases = [(x, p["rate"]) for x, p in ZFP.sample_inputs(rng)]
    for _ in range(12):
        shape = tuple(int(s) for s in rng.integers(1, 23, size=int(rng.integers(1, 5))))
        with np.errstate(over="ignore"):
            x = (rng.standard_normal(shape) * 10 ** rng.uniform(-44, 38)).astype(np.float32)
        x[rng.random(shape) < 0.05] = np.nan
        x[rng.random(shape) < 0.3] = 0
        cases.append((x, int(rng.integers(zfp.MIN_RATE, zfp.MAX_RATE + 1))))
    cases.append((np.concatenate([_SPECIALS, _NAN_PAYLOAD]), 8))
    cases += [(np.maximum(rng.standard_normal((3, 64, 33, 35)), 0).astype(np.float32), r) for r in (4, 8, 13)]
    cases.append((rng.standard_normal(100_001).astype(np.float32), 5))
    return cases


@pytest.mark.gpu
def test_gpu_words_match_cpu_and_cross_decode() -> None:
    cp = cupy_or_skip()
    for x, rate in _gpu_cases():
        cpu = ZFP.encode(x, rate=rate)
        gpu_payload = ZFP.encode(cp.asarray(x), rate=rate)
        for name, c, g in zip(ZFP.payload_names, cpu, gpu_payload):
            assert isinstance(g, cp.ndarray) and g.dtype == c.dtype, name
            np.testing.assert_array_equal(cp.asnumpy(g), c, err_msg=f"{name} {x.shape} rate {rate}")
        want = ZFP.decode(cpu).view(np.uint32)
        np.testing.assert_array_equal(cp.asnumpy(ZFP.decode(gpu_payload)).view(np.uint32), want)
        np.testing.assert_array_equal(cp.asnumpy(ZFP.decode(tuple(cp.asarray(p) for p in cpu))).view(np.uint32), want)
        np.testing.assert_array_equal(ZFP.decode(tuple(cp.asnumpy(p) for p in gpu_payload)).view(np.uint32), want)


@pytest.mark.gpu
def test_gpu_rejects_bad_exponent() -> None:
    cp = cupy_or_skip()
    header, data, idx, obits, shape = ZFP.encode(np.ones((4, 4), np.float32), rate=8)
    data = data.copy()
    data[0] |= np.uint32(0x1FF)
    with pytest.raises(ValueError, match="exponent"):
        ZFP.decode(tuple(cp.asarray(p) for p in (header, data, idx, obits, shape)))


# -- tools -----------------------------------------------------------------------------------------------
def test_bench_tool_smoke(tmp_path: Any) -> None:
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "bench_zfp.py"
    spec = importlib.util.spec_from_file_location("_tool_bench_zfp", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    acts = tmp_path / "acts"
    acts.mkdir()
    x = np.maximum(np.random.default_rng(0).standard_normal((2, 8, 13, 11)), 0).astype(np.float32)
    np.save(acts / "a.npy", x)
    np.save(acts / "a_copy.npy", x)  # identical tensors are benchmarked once
    assert tool.main(["--dir", str(acts), "--min-mib", "0", "--repeat", "1", "--rates", "4", "8",
                      "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "bench.json").read_text())["rows"]
    ours = [r for r in rows if r["method"].startswith("onnxcomp")]
    assert [r["rate"] for r in ours] == [4, 8]
    assert ours[0]["ratio"] < 8 and ours[1]["rms_err"] < ours[0]["rms_err"]  # padding: 13x11 -> 16x12
    if any(r["method"].startswith("zfpy") for r in rows):
        assert {r["method"] for r in rows} >= {"zfpy 2-D", "zfpy N-D"}
    assert (tmp_path / "out" / "tables.md").read_text().startswith("## Summary")


# -- the CUDA source, run on the host --------------------------------------------------------------------
def test_cuda_source_compiled_as_host_cpp_matches_numpy(tmp_path: Any) -> None:
    """kernels/zfp.cu compiled as plain C++ (tests/cuda_host_shim.h: one thread walks every block, atomics
    are plain ORs) writes the NumPy coder's words and decodes them to the same values. Checks the kernel's
    arithmetic where no GPU is available; FTZ, real atomics and launch geometry need the GPU tests above."""
    import ctypes
    import shutil
    import subprocess
    from pathlib import Path

    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    root = Path(__file__).resolve().parents[1]
    src = tmp_path / "zfp_host.cpp"
    src.write_text(f'#include "{root / "tests" / "cuda_host_shim.h"}"\n'
                   f'#include "{root / "custom_ops" / "kernels" / "zfp.cu"}"\n')
    lib_path = tmp_path / "libzfp_host.so"
    subprocess.run([cxx, "-O1", "-std=c++17", "-shared", "-fPIC", "-o", str(lib_path), str(src)], check=True)
    lib = ctypes.CDLL(str(lib_path))
    p, i64, i32 = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int
    lib.zfp_encode.argtypes = [p, i64, i64, i64, i64, i32, i32, p]
    lib.zfp_decode.argtypes = [p, i64, i64, i64, i64, i32, i32, p, p]
    for x, rate in _gpu_cases():
        layout = zfp.layout_of(x.shape)
        flat = np.ascontiguousarray(x).reshape(-1)
        want = ZFP.encode(x, rate=rate)
        words = np.zeros(zfp.data_words(layout, rate), np.uint32)
        lib.zfp_encode(flat.ctypes.data, flat.size, layout.height, layout.width, layout.nblocks, int(layout.two_d),
                       rate, words.ctypes.data)
        np.testing.assert_array_equal(words, want[1], err_msg=f"{x.shape} rate {rate}")
        y = np.empty(flat.size, np.float32)
        bad = np.zeros(1, np.int32)
        lib.zfp_decode(words.ctypes.data, flat.size, layout.height, layout.width, layout.nblocks,
                       int(layout.two_d), rate, y.ctypes.data, bad.ctypes.data)
        y.view(np.uint32)[want[2]] = want[3]
        assert not bad[0]
        np.testing.assert_array_equal(y.view(np.uint32), ZFP.decode(want).reshape(-1).view(np.uint32))


def _sparse_tasks(x: np.ndarray, rate: int) -> int:
    """Tasks of a 2-D layout that take the compiled encoder's sparse pack (counted with the kernel's own stages;
    the decoder derives the same first bits from the stream). For every task, sparse or not, the sparse pack's
    words must equal the full every-field-against-every-word pack's (the fallback of tasks with many pairs)."""
    from onnxcomp.custom_ops import _zfp_numba as K

    lay = zfp.layout_of(x.shape)
    xi = np.ascontiguousarray(x).reshape(-1).view(np.int32)
    budget = rate * 16
    nwb = -(-budget // 32)
    lc, av = np.int32(zfp.PRECISION + 1), np.int32(budget - (zfp.EXP_BITS + 10))
    S, T, R = np.empty(K._ROWS * K.G, np.int32), np.empty(16 * K.G, np.int32), np.empty(32, np.int64)
    o_full, o_sparse = np.empty(18 * K.G, np.int32), np.full(18 * K.G, 0x5A5A5A5A, np.int32)
    sparse = 0
    for b0 in range(0, lay.nblocks, K.G):
        nb = min(lay.nblocks - b0, K.G)
        K._gather_s(xi, xi.size, lay.height, lay.width, True, b0, nb, S, T)
        K._front2d(S, nb, lc, av, zfp.EXP_BITS, zfp.EXP_BIAS)
        K._step2d(S, nb, lc, av, zfp.EXP_BITS)
        pairs = K._ranges2d(S, nb, K._RPOS, K._RD + 5, nwb, R)
        sparse += nwb >= K._SPARSE_MIN_WORDS and pairs <= K._SPARSE_MAX * nwb
        K._pack2d(S, o_full, nb, nwb)
        K._pack2d_sparse(S, o_sparse, nb, nwb, R)
        for k in range(nwb):
            np.testing.assert_array_equal(o_sparse[k * K.G:k * K.G + nb], o_full[k * K.G:k * K.G + nb])
    return sparse


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("rate", [12, 16, 17, 24])
def test_compiled_sparse_pack_agrees_with_numpy(rate: int) -> None:
    """From six words per block on, a task whose fields reach few words packs / extracts only those (field, word)
    pairs (real activations: every task). Smooth planes with all-zero blocks (left out of the word ranges),
    blocky mixed-scale planes, tasks across planes, a partial last task, an odd rate (blocks start mid-word):
    the sparse pack writes the same words as the full one on every task, sparse tasks occur, and the stream
    words and decoded values equal the NumPy coder's."""
    rng = np.random.default_rng(rate)
    smooth = np.cumsum(np.cumsum(rng.standard_normal((4, 64, 60)), 1), 2)
    smooth[0, 8:24, 16:40] = 0.0
    # 240 blocks per plane: tasks cross planes, the last task is partial
    x = np.asarray(np.concatenate([smooth[:3], _blocky(rng, (2, 64, 60), np.arange(-60, 60)), smooth[3:]]),
                   dtype=np.float32)
    assert _sparse_tasks(x, rate) > 0
    _assert_compiled_matches_numpy(x, rate)


@pytest.mark.skipif(not zfp.USE_NUMBA, reason="numba not installed")
@pytest.mark.parametrize("shape", [(4, 6, 13, 16), (2, 3, 18, 32), (2, 5, 7, 48), (2, 1, 30, 80), (1, 1, 4, 16),
                                   (2, 2, 8, 64)])
def test_compiled_gather_direct_rows(shape: tuple[int, ...]) -> None:
    """Maps with w % 16 == 0 take the encoder's direct gather (rows of 8 or 4 blocks deinterleaved by an LLVM
    shuffle, no staging table): 8- and 4-block rows (w = 16, 32, 48, 80, 64), runs that cross tasks mid-row
    (80-wide: 20 blocks per row) and planes, clamped last block rows (h % 4 != 0), a partial last task. Every
    task's scratch rows equal a NumPy gather (value 4r + c of a block = its row r, column c, the last row repeated
    past h), and the words and decoded values equal the NumPy coder's."""
    from onnxcomp.custom_ops import _zfp_numba as K

    rng = np.random.default_rng(sum(shape))
    x = _blocky(rng, shape, np.arange(-20, 20))
    lay = zfp.layout_of(shape)
    h, w = lay.height, lay.width
    assert w % 16 == 0
    planes = x.reshape(-1, h, w)
    padded = np.pad(planes, ((0, 0), (0, -h % 4), (0, 0)), mode="edge")
    want = padded.reshape(len(planes), -(-h // 4), 4, w // 4, 4).transpose(0, 1, 3, 2, 4).reshape(-1, 16)
    assert len(want) == lay.nblocks
    xi = np.ascontiguousarray(x).reshape(-1).view(np.int32)
    S, T = np.full(K._ROWS * K.G, 0x5A5A5A5A, np.int32), np.empty(16 * K.G, np.int32)
    for b0 in range(0, lay.nblocks, K.G):
        nb = min(lay.nblocks - b0, K.G)
        K._gather_s(xi, xi.size, h, w, True, b0, nb, S, T)
        got = S[:16 * K.G].reshape(16, K.G)[:, :nb].T
        np.testing.assert_array_equal(got, want[b0:b0 + nb].view(np.int32))
    for rate in (4, 8, 16):
        _assert_compiled_matches_numpy(x, rate)
