"""ZVC and narrow-index CSR codecs: bitwise round trips, byte layouts, size predictions, chooser, kernels."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import cupy_or_skip
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnxcomp.custom_ops import cpu
from onnxcomp.custom_ops.base import KERNEL_DIR, Codec, get_codec
from onnxcomp.custom_ops.sparse import CSR_ROW
from onnxcomp.custom_ops.sparse_select import (
    choose_sparse_codec,
    count_nonzero,
    measure_density,
    predicted_sizes,
)

# Every test here runs against both CPU backends: the NumPy reference and the compiled kernels.
pytestmark = pytest.mark.usefixtures("codec_backend")

CODECS = ("zvc", "csr")
# Bit patterns that must survive exactly: +-0, +-Inf, quiet/signalling NaNs with payloads, denormals.
SPECIAL_WORDS = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FC00001, 0xFFFFFFFF,
                 0x7F800001, 0x00000001, 0x807FFFFF, 0x3F800000]


def words_of(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def random_tensor(shape: tuple[int, ...], density: float, seed: int = 0) -> np.ndarray:
    """float32 tensor of arbitrary bit patterns (NaN payloads, -0.0, ...) with about ``density`` nonzeros."""
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    w[rng.random(shape) >= density] = 0
    return w.view(np.float32)


def assert_roundtrip(name: str, x: np.ndarray) -> tuple[Any, ...]:
    codec: Codec = get_codec(name)
    payload = codec.encode(x)
    assert len(payload) == len(codec.payload_names)
    assert [p.dtype.name for p in payload] == list(codec.payload_dtypes)
    y = codec.decode(payload)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_array_equal(words_of(y), words_of(x))
    nnz = count_nonzero(x)
    assert codec.payload_nbytes(payload) == codec.predicted_nbytes(x.shape, nnz=nnz)
    assert codec.payload_nbytes(payload) == codec.predicted_nbytes(x.shape, density=measure_density(x))
    return payload


word_arrays = hnp.arrays(
    np.uint32,
    hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=19),
    elements=st.sampled_from(SPECIAL_WORDS) | st.integers(0, 2**32 - 1) | st.just(0),
)


# -- round trips ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", CODECS)
@settings(max_examples=150, deadline=None)
@given(w=word_arrays)
def test_roundtrip_bitwise_random_shapes(name: str, w: np.ndarray) -> None:
    assert_roundtrip(name, w.view(np.float32))


EDGE_SHAPES = [(), (0,), (0, 4), (3, 0, 5), (1,), (7,), (8,), (9,), (255,), (256,), (257,), (511,), (2, 3, 257),
               (5, 7, 11, 13)]


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=str)
@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
def test_roundtrip_edge_shapes(name: str, shape: tuple[int, ...], density: float) -> None:
    assert_roundtrip(name, random_tensor(shape, density, seed=len(shape)))


@pytest.mark.parametrize("name", CODECS)
def test_specials_kept_exactly(name: str) -> None:
    x = np.array(SPECIAL_WORDS * 30, dtype=np.uint32).view(np.float32).reshape(30, -1)
    payload = assert_roundtrip(name, x)
    # -0.0 and every NaN count as nonzero; only +0.0 is dropped.
    assert count_nonzero(x) == x.size - 30
    values = payload[get_codec(name).payload_names.index("values")]
    np.testing.assert_array_equal(words_of(values), words_of(x)[words_of(x) != 0])


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("density", np.linspace(0.0, 1.0, 11).tolist())
def test_density_sweep(name: str, density: float) -> None:
    x = random_tensor((3, 37, 41), density, seed=int(density * 100))
    assert_roundtrip(name, x)


@pytest.mark.parametrize("name", CODECS)
def test_non_contiguous_input(name: str) -> None:
    x = random_tensor((6, 50, 9), 0.4).transpose(2, 0, 1)
    assert not x.flags.c_contiguous
    assert_roundtrip(name, x)


@pytest.mark.parametrize("name", CODECS)
def test_rejects_non_float32(name: str) -> None:
    with pytest.raises(TypeError):
        get_codec(name).encode(np.ones(4, dtype=np.float64))


@pytest.mark.parametrize("name", CODECS)
def test_rejects_inconsistent_payload(name: str) -> None:
    codec = get_codec(name)
    payload = list(codec.encode(random_tensor((3, 300), 0.5)))
    payload[0] = payload[0][:-1]  # bitmap (zvc) / values (csr) one entry short
    with pytest.raises(ValueError):
        codec.decode(tuple(payload))


def _corrupt_payloads() -> list[tuple[str, tuple[Any, ...]]]:
    """Payloads of a (3, 300) tensor whose sizes agree but whose indices would read or write out of bounds."""
    x = random_tensor((3, 300), 0.5, seed=5)
    bitmap, zvalues, zshape = get_codec("zvc").encode(x)
    values, cols, row_ptr, shape = get_codec("csr").encode(x)
    extra_bit = bitmap.copy()
    extra_bit[np.flatnonzero(extra_bit != 0xFF)[0]] = 0xFF        # marks more nonzeros than stored
    decreasing = row_ptr.copy()
    decreasing[1], decreasing[2] = decreasing[2], decreasing[1]
    overfull = row_ptr.copy()
    overfull[1], overfull[2] = 0, row_ptr[3]                      # row 1 claims rows 0-2's ~380 values
    assert np.diff(overfull).max() > CSR_ROW and np.diff(overfull).min() >= 0
    shifted = row_ptr.copy()
    shifted[0] = 1
    past_end = cols.copy()
    past_end[-1] = 255                                            # 900 = 3*256 + 132: last row is 132 long
    return [("zvc", (extra_bit, zvalues, zshape)), ("csr", (values, cols, decreasing, shape)),
            ("csr", (values, cols, overfull, shape)), ("csr", (values, cols, shifted, shape)),
            ("csr", (values, past_end, row_ptr, shape))]


@pytest.mark.parametrize("case", range(5))
def test_rejects_out_of_bounds_indices(case: int) -> None:
    name, payload = _corrupt_payloads()[case]
    with pytest.raises(ValueError, match=name):
        get_codec(name).decode(payload)


# -- byte layouts -----------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(w=word_arrays)
def test_layouts(w: np.ndarray) -> None:
    flat = w.reshape(-1)
    nz = np.flatnonzero(flat)
    bitmap, zvalues, zshape = get_codec("zvc").encode(w.view(np.float32))
    np.testing.assert_array_equal(bitmap, np.packbits(flat != 0, bitorder="little"))
    np.testing.assert_array_equal(words_of(zvalues), flat[nz])
    np.testing.assert_array_equal(zshape, np.asarray(w.shape, dtype=np.int64))

    cvalues, cols, row_ptr, cshape = get_codec("csr").encode(w.view(np.float32))
    np.testing.assert_array_equal(words_of(cvalues), flat[nz])  # same order as ZVC
    np.testing.assert_array_equal(cols, nz % CSR_ROW)
    nrows = -(-flat.size // CSR_ROW)
    np.testing.assert_array_equal(row_ptr, np.searchsorted(nz, np.arange(nrows + 1) * CSR_ROW))
    np.testing.assert_array_equal(cshape, zshape)


# -- size prediction and chooser -------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=64), frac=st.floats(0.0, 1.0))
def test_chooser_never_larger_than_dense(shape: tuple[int, ...], frac: float) -> None:
    n = int(np.prod(shape, dtype=np.int64))
    nnz = int(frac * n)
    sizes = predicted_sizes(shape, nnz=nnz)
    choice = choose_sparse_codec(shape=shape, nnz=nnz)
    assert sizes[choice] <= sizes["dense"]
    assert sizes[choice] == min(sizes.values())
    assert choice == "dense" or sizes[choice] < sizes["dense"]


def test_chooser_regions() -> None:
    shape = (32, 64, 28, 28)
    assert choose_sparse_codec(shape=shape, density=0.0) == "csr"
    assert choose_sparse_codec(shape=shape, density=0.05) == "csr"
    assert choose_sparse_codec(shape=shape, density=0.2) == "zvc"
    assert choose_sparse_codec(shape=shape, density=0.9) == "zvc"
    assert choose_sparse_codec(shape=shape, density=0.99) == "dense"
    assert choose_sparse_codec(shape=(0, 3), density=0.0) == "dense"  # empty: nothing beats 0 bytes


@pytest.mark.parametrize("density", [0.0, 0.03, 0.12, 0.5, 0.8, 0.97, 1.0])
def test_chooser_on_tensor_matches_actual_sizes(density: float) -> None:
    x = random_tensor((4, 16, 33), density, seed=3)
    choice = choose_sparse_codec(x)
    actual = {name: Codec.payload_nbytes(get_codec(name).encode(x)) for name in CODECS}
    actual["dense"] = x.nbytes
    assert actual[choice] == min(actual.values())
    assert choice == "dense" or actual[choice] < x.nbytes


def test_prediction_needs_stats() -> None:
    with pytest.raises(TypeError):
        get_codec("zvc").predicted_nbytes((4, 4))
    with pytest.raises(ValueError):
        get_codec("csr").predicted_nbytes((4, 4), nnz=17)


def test_measure_density() -> None:
    assert measure_density(np.zeros((0,), np.float32)) == 0.0
    assert measure_density(np.array([0.0, -0.0, np.nan, 1.0], np.float32)) == 0.75


# -- kernels ----------------------------------------------------------------------------------------------
KERNELS = {"zvc.cu": ["zvc_encode_count", "zvc_encode_scatter", "zvc_decode_count", "zvc_decode_scatter"],
           "csr.cu": ["csr_encode_count", "csr_encode_scatter", "csr_decode"]}


@pytest.mark.parametrize("kernel_file", sorted(KERNELS))
def test_kernels_compile_with_nvrtc(kernel_file: str) -> None:
    from onnxcomp.custom_ops import nvrtc
    from onnxcomp.custom_ops.gpu import NVRTC_OPTIONS

    try:
        nvrtc.find_libnvrtc()
    except nvrtc.NvrtcNotFound as e:
        pytest.skip(str(e))
    ptx = nvrtc.compile_to_ptx((KERNEL_DIR / kernel_file).read_text(), kernel_file, NVRTC_OPTIONS)
    for name in KERNELS[kernel_file]:
        assert f".entry {name}(" in ptx  # extern "C": unmangled entry points


@pytest.fixture(scope="module")
def cp() -> Any:
    return cupy_or_skip()


GPU_CASES = [((), 1.0), ((0,), 0.5), ((0, 4), 0.0), ((1,), 1.0), ((9,), 0.5), ((257,), 0.3), ((3, 5, 7), 0.0),
             ((2, 3, 17, 9), 1.0), ((4, 1000), 0.02), ((8, 16, 33, 31), 0.5), ((32, 64, 64, 64), 0.5)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("shape,density", GPU_CASES, ids=str)
def test_gpu_matches_cpu_bytes(cp: Any, name: str, shape: tuple[int, ...], density: float) -> None:
    codec = get_codec(name)
    x = random_tensor(shape, density, seed=7)
    if x.size >= len(SPECIAL_WORDS):
        words_of(x).reshape(-1)[: len(SPECIAL_WORDS)] = SPECIAL_WORDS
    cpu = codec.encode(x)
    dev = codec.encode(cp.asarray(x))
    for a, b, pname in zip(cpu, dev, codec.payload_names):
        assert b.dtype == a.dtype and b.shape == a.shape, pname
        assert cp.asnumpy(b).tobytes() == a.tobytes(), pname
    # Both decoders, on both payloads: GPU->GPU, CPU payload on GPU, GPU payload on CPU.
    want = words_of(x)
    for y in (codec.decode(dev), codec.decode(tuple(cp.asarray(p) for p in cpu))):
        assert isinstance(y, cp.ndarray) and y.shape == x.shape
        np.testing.assert_array_equal(words_of(cp.asnumpy(y)), want)
    y = codec.decode(tuple(cp.asnumpy(p) for p in dev))
    np.testing.assert_array_equal(words_of(y), want)


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(5))
def test_gpu_rejects_out_of_bounds_indices(cp: Any, case: int) -> None:
    name, payload = _corrupt_payloads()[case]
    with pytest.raises(ValueError, match=name):
        get_codec(name).decode(tuple(cp.asarray(p) for p in payload))


@pytest.mark.gpu
def test_gpu_non_contiguous_and_chooser(cp: Any) -> None:
    x = random_tensor((6, 50, 9), 0.1)
    xd = cp.asarray(x).transpose(2, 0, 1)
    assert count_nonzero(xd) == count_nonzero(x)
    assert choose_sparse_codec(xd) == choose_sparse_codec(x.transpose(2, 0, 1))
    for name in CODECS:
        codec = get_codec(name)
        y = codec.decode(codec.encode(xd))
        np.testing.assert_array_equal(words_of(cp.asnumpy(y)), words_of(x.transpose(2, 0, 1)))


def test_zvc_counted_encode_rejects_a_wrong_count() -> None:
    """``encode_cpu_counted`` trusts the caller's count to size ``values``: a wrong one must raise, not leave
    values unwritten or cut off (NumPy path; the compiled path counts for itself)."""
    x = np.array([0.0, 1.0, 0.0, -0.0, np.nan, 0.0, 2.0], np.float32)
    zvc = get_codec("zvc")
    with cpu.use_backend("numpy"):
        good = zvc.encode_cpu_counted(x, 4)
        assert good[1].view(np.uint32).tobytes() == x[x.view(np.uint32) != 0].view(np.uint32).tobytes()
        for nnz in (3, 5):
            with pytest.raises(ValueError, match="nnz"):
                zvc.encode_cpu_counted(x, nnz)
