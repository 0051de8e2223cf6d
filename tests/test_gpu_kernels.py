"""Every codec's CUDA kernels against its NumPy twin, on property-test inputs (skipped without a GPU).

* Encode on the GPU gives the NumPy payload byte for byte; each backend decodes the other's payload to the same
  bits (hypothesis arrays: odd sizes, NaN/±Inf/−0.0/subnormals, all-zero, empty, 0-d).
* The grid-stride loops are exercised by capping the launch grid at two blocks.
* Corrupt payloads (flipped bits, a truncated or lengthened array, a wrong shape) fail the same way on both
  backends: a ValueError on both, or the same decoded bits on both; never a CUDA fault. Run this file under
  ``compute-sanitizer`` with ``ONNXCOMP_CUPY_NO_POOL=1`` so each array is its own allocation and an
  out-of-bounds access cannot hide inside CuPy's memory pool.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import cupy_or_skip
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnxcomp.custom_ops import REGISTRY, get_codec, gpu
from onnxcomp.custom_ops import maxpool_index as mpi

pytestmark = pytest.mark.gpu

# Fewer examples under compute-sanitizer, where every launch is instrumented.
EXAMPLES = int(os.environ.get("ONNXCOMP_GPU_EXAMPLES", "60"))
FLOAT_CODECS = sorted(n for n, c in REGISTRY.items() if c.input_dtype == "float32" and n != "sz")
# Codecs whose encoder needs a parameter with no default (their own property tests sweep it).
REQUIRED_PARAMS: dict[str, dict[str, Any]] = {"zfp": {"rate": 8}, "sz": {"eb": 1e-2}, "intervalmask": {"lo": 0.0, "hi": 6.0}}
SZ_EBS = (1e-6, 1e-3, 0.05, 4.0)


@pytest.fixture(scope="module")
def cp() -> Any:
    cupy = cupy_or_skip()
    if os.environ.get("ONNXCOMP_CUPY_NO_POOL"):
        cupy.cuda.set_allocator(None)
    return cupy


@pytest.fixture(params=["full_grid", "two_blocks"])
def grid(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run once with the normal grid and once with the grid capped at two blocks (grid-stride loops)."""
    if request.param == "two_blocks":
        monkeypatch.setattr(gpu, "_MAX_GRID", 2)
    return request.param


def _bits(a: Any) -> np.ndarray:
    """Host bytes of an array, for bitwise comparison (NaN payloads, -0.0 and bools compare exactly)."""
    a = a.get() if hasattr(a, "get") else np.asarray(a)
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def to_device(cp: Any, x: np.ndarray) -> Any:
    """x on the GPU bit for bit. (CuPy 14's asarray of a 0-d -0.0 gives +0.0 -- it fills zeros with a memset --
    so arrays travel 1-d.)"""
    return cp.asarray(np.ascontiguousarray(x).reshape(-1)).reshape(x.shape)


def check_codec(cp: Any, name: str, x: np.ndarray, params: dict[str, Any]) -> None:
    """GPU encode == NumPy encode (bytes, dtypes, shapes); all four encode/decode pairings agree bitwise."""
    codec = get_codec(name)
    cpu = codec.encode(x, **params)
    dev = codec.encode(to_device(cp, x), **params)
    assert np.array_equal(_bits(to_device(cp, x)), _bits(x))
    assert len(dev) == len(cpu) == len(codec.payload_names)
    for pname, c, g in zip(codec.payload_names, cpu, dev):
        assert isinstance(g, cp.ndarray), pname
        assert g.dtype == c.dtype and g.shape == c.shape, (pname, g.dtype, c.dtype, g.shape, c.shape)
        assert np.array_equal(_bits(g), _bits(c)), f"{name}: payload {pname!r} differs from NumPy's"
    want = codec.decode(cpu, **params)
    for label, y in (("gpu->gpu", codec.decode(dev, **params)),
                     ("cpu->gpu", codec.decode(tuple(cp.asarray(p) for p in cpu), **params))):
        assert isinstance(y, cp.ndarray) and y.dtype == want.dtype and y.shape == want.shape, label
        assert np.array_equal(_bits(y), _bits(want)), f"{name}: {label} decode differs from NumPy's"
    y = codec.decode(tuple(cp.asnumpy(p) for p in dev), **params)
    assert np.array_equal(_bits(y), _bits(want)), f"{name}: gpu->cpu decode differs"


# -- inputs ---------------------------------------------------------------------------------------------------
special = st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 3.4e38, 65504.0, 240.0, 1.0])
elements = st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
                     special, st.just(0.0))
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=45)
float_arrays = hnp.arrays(np.float32, shapes, elements=elements)
fills = st.sampled_from(["as_drawn", "zeros", "neg_zeros", "relu", "sparse"])


def _shape_fill(x: np.ndarray, fill: str, rng: np.random.Generator) -> np.ndarray:
    """All-zero, all -0.0, ReLU-like or mostly-zero variants of a drawn array (sparse codecs switch mode)."""
    if fill == "zeros":
        return np.zeros_like(x)
    if fill == "neg_zeros":
        return np.full_like(x, -0.0)
    if fill == "relu":
        return np.maximum(rng.standard_normal(x.shape), 0).astype(np.float32)
    if fill == "sparse":
        y = rng.standard_normal(x.shape).astype(np.float32)
        y[rng.random(x.shape) > 0.05] = 0.0
        return y
    return x


@pytest.mark.parametrize("name", FLOAT_CODECS)
def test_sample_inputs(cp: Any, grid: str, name: str) -> None:
    for x, params in get_codec(name).sample_inputs(np.random.default_rng(3)):
        check_codec(cp, name, x, params)


@pytest.mark.parametrize("name", ["sz", "maxpool_index"])
def test_sample_inputs_sz_maxpool(cp: Any, grid: str, name: str) -> None:
    for x, params in get_codec(name).sample_inputs(np.random.default_rng(4)):
        check_codec(cp, name, x, params)


@pytest.mark.parametrize("name", FLOAT_CODECS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(x=float_arrays, fill=fills, seed=st.integers(0, 2**32 - 1))
def test_property_float_codecs(cp: Any, name: str, x: np.ndarray, fill: str, seed: int) -> None:
    check_codec(cp, name, _shape_fill(x, fill, np.random.default_rng(seed)), REQUIRED_PARAMS.get(name, {}))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(x=float_arrays, fill=fills, eb=st.sampled_from(SZ_EBS), scale=st.sampled_from([1.0, 1e-3, 1e4]),
       seed=st.integers(0, 2**32 - 1))
def test_property_sz(cp: Any, x: np.ndarray, fill: str, eb: float, scale: float, seed: int) -> None:
    y = _shape_fill(x, fill, np.random.default_rng(seed))
    with np.errstate(all="ignore"):
        y = (y * np.float32(scale)).astype(np.float32)
    check_codec(cp, "sz", y, {"eb": eb})


@st.composite
def pool_cases(draw: st.DrawFn) -> tuple[np.ndarray, dict[str, Any]]:
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw)]
    N, C = draw(st.integers(0, 3)), draw(st.integers(1, 4))
    H = draw(st.integers((kh - 1) * dh + 1, 23))
    W = draw(st.integers((kw - 1) * dw + 1, 23))
    params = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=pads, dilations=[dh, dw],
                  ceil_mode=draw(st.integers(0, 1)))
    x = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(-2, 3, size=(N, C, H, W))
    return mpi.reference_indices(x.astype(np.float32), **params), dict(input_shape=[N, C, H, W], **params)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=pool_cases())
def test_property_maxpool_index(cp: Any, case: tuple[np.ndarray, dict[str, Any]]) -> None:
    idx, params = case
    check_codec(cp, "maxpool_index", idx, params)


def test_maxpool_rejects_foreign_indices(cp: Any) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)
    params = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    idx = cp.asarray(mpi.reference_indices(x, **params))
    idx[1, 2, 3, 3] += 1 + 9 * 9  # the next plane's element: outside its window
    with pytest.raises(ValueError, match="window"):
        get_codec("maxpool_index").encode(idx, input_shape=[2, 3, 9, 9], **params)


# -- corrupt payloads -----------------------------------------------------------------------------------------
def _valid_case(name: str, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    if name == "maxpool_index":
        params = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        x = rng.integers(-2, 3, size=(2, 3, 13, 11)).astype(np.float32)
        return mpi.reference_indices(x, **params), dict(input_shape=[2, 3, 13, 11], **params)
    x = rng.standard_normal((3, 7, 41)).astype(np.float32)
    x[rng.random(x.shape) < rng.choice([0.02, 0.5, 0.97])] = 0.0
    return x, REQUIRED_PARAMS.get(name, {})


def _mutate(payload: tuple[np.ndarray, ...], names: tuple[str, ...], rng: np.random.Generator,
            how: str) -> tuple[np.ndarray, ...]:
    arrays = [np.array(p, copy=True) for p in payload]
    body = [i for i, n in enumerate(names) if n != "shape" and arrays[i].size]
    shape_i = names.index("shape")
    if how == "flip" and body:
        i = int(rng.choice(body))
        raw = arrays[i].reshape(-1).view(np.uint8)
        for pos in rng.integers(0, raw.size, size=int(rng.integers(1, 4))):
            raw[pos] ^= np.uint8(1 << int(rng.integers(0, 8)))
    elif how == "truncate" and body:
        i = int(rng.choice(body))
        arrays[i] = arrays[i].reshape(-1)[:-1]
    elif how == "extend":
        i = int(rng.choice([j for j, n in enumerate(names) if n != "shape"]))
        a = arrays[i].reshape(-1)
        arrays[i] = np.concatenate([a, a[:1] if a.size else np.zeros(1, a.dtype)])
    elif how == "shape" and arrays[shape_i].size:
        d = int(rng.integers(0, arrays[shape_i].size))
        arrays[shape_i][d] = max(0, int(arrays[shape_i][d]) + int(rng.choice([-1, 1])))
    return tuple(arrays)


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except ValueError as exc:
        return "ValueError", exc


def _has_duplicate_columns(payload: tuple[np.ndarray, ...]) -> bool:
    """A CSR payload whose row repeats a column: the decoders' writes then race (no out-of-bounds access)."""
    _, cols, row_ptr, _ = payload
    rp = np.clip(np.asarray(row_ptr, np.int64), 0, cols.size)
    return any(np.unique(cols[a:b]).size != b - a for a, b in zip(rp[:-1], rp[1:]) if b > a)


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("how", ["flip", "truncate", "extend", "shape"])
def test_corrupt_payload_fails_alike(cp: Any, name: str, how: str) -> None:
    codec = get_codec(name)
    for seed in range(12):
        rng = np.random.default_rng(seed)
        x, params = _valid_case(name, rng)
        bad = _mutate(codec.encode(x, **params), codec.payload_names, rng, how)
        on_cpu = _outcome(lambda: codec.decode(bad, **params))
        on_gpu = _outcome(lambda: codec.decode(tuple(cp.asarray(p) for p in bad), **params))
        cp.cuda.Device().synchronize()  # a kernel fault surfaces here, not as a silent wrong answer
        assert on_gpu[0] == on_cpu[0], f"{name}/{how}/seed {seed}: CPU {on_cpu}, GPU {on_gpu}"
        if on_cpu[0] == "ok":
            if name == "csr" and _has_duplicate_columns(bad):
                assert on_gpu[1].shape == on_cpu[1].shape
                continue
            assert np.array_equal(_bits(on_gpu[1]), _bits(on_cpu[1])), f"{name}/{how}/seed {seed}"


def test_bench_relu_like_1m_all_codecs(cp: Any) -> None:
    """One realistic 4 MiB activation through every float codec (sizes where the grid is full)."""
    rng = np.random.default_rng(5)
    x = np.maximum(rng.standard_normal((4, 64, 64, 64)), 0).astype(np.float32)
    for name in FLOAT_CODECS:
        check_codec(cp, name, x, REQUIRED_PARAMS.get(name, {}))
    check_codec(cp, "sz", x, {"eb": 1e-3})
