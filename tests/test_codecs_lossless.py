"""Lossless codecs: exact round trips (NumPy), MaxPool indices against ONNX Runtime's own, and GPU == CPU
bytes for every registered codec (skipped without CuPy + a GPU)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import cupy_or_skip
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnxcomp.custom_ops import REGISTRY, get_codec
from onnxcomp.custom_ops import cpu
from onnxcomp.custom_ops import maxpool_index as mpi

# Every test here runs against both CPU backends: the NumPy reference and the compiled kernels.
pytestmark = pytest.mark.usefixtures("codec_backend")

SIGNBITS = get_codec("signbits")
MAXPOOL = get_codec("maxpool_index")


# -- signbits ---------------------------------------------------------------------------------------------
def _check_signbits(x: np.ndarray) -> None:
    bits, shape = SIGNBITS.encode(x)
    assert bits.dtype == np.uint8 and shape.dtype == np.int64
    assert tuple(shape) == x.shape
    assert bits.size == (x.size + 7) // 8
    assert SIGNBITS.payload_nbytes((bits, shape)) == SIGNBITS.predicted_nbytes(x.shape)
    np.testing.assert_array_equal(bits, np.packbits((x > 0).reshape(-1), bitorder="little"))
    y = SIGNBITS.decode((bits, shape))
    assert y.dtype == np.float32 and y.shape == x.shape
    expected = np.where(x > 0, np.float32(1), np.float32(0))
    assert np.array_equal(y, expected) and not np.signbit(y).any()  # never -0.0


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=11),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)))
def test_signbits_round_trip_hypothesis(x: np.ndarray) -> None:
    _check_signbits(x)


@pytest.mark.parametrize("x", [
    np.zeros((3, 5, 7), np.float32),
    np.full((2, 9), 0.5, np.float32),
    np.full((17,), -0.0, np.float32),
    np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45], np.float32),
    np.zeros((0,), np.float32),
    np.zeros((4, 0, 3), np.float32),
    np.float32(3.0).reshape(()),
], ids=["zeros", "positive", "neg-zero", "specials", "empty", "empty-mid", "scalar"])
def test_signbits_special_cases(x: np.ndarray) -> None:
    _check_signbits(x)


def test_signbits_specials_bits() -> None:
    x = np.array([np.nan, -0.0, np.inf, 0.0, -np.inf, 1.0, -1.0, 1e-45, 2.0], np.float32)
    bits, _ = SIGNBITS.encode(x)
    assert bits.tolist() == [0b10100100, 0b1]


# -- b-bit packing ----------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 20), st.integers(0, 300), st.integers(0, 2**32 - 1))
def test_pack_bits_matches_bit_stream(bits: int, n: int, seed: int) -> None:
    values = np.random.default_rng(seed).integers(0, 1 << bits, size=n)
    packed = mpi.pack_bits(values, bits)
    ref = np.packbits(((values[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1), bitorder="little")
    np.testing.assert_array_equal(packed, ref)
    np.testing.assert_array_equal(mpi.unpack_bits(packed, bits, n).astype(np.int64), values)


@settings(max_examples=120, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.integers(1, 64), st.integers(0, 200), st.integers(0, 2**32 - 1))
def test_offsets_outside_window_matches_unpacked_check(bits: int, window: int, n: int, seed: int) -> None:
    """The byte-table check the decoder runs instead of unpacking says what ``unpack_bits(...).max() >= window``
    says, on random payloads (random padding bits in the last byte included: only the first n offsets count)."""
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, size=(n * bits + 7) // 8, dtype=np.uint8)
    if rng.random() < 0.5:  # mostly valid offsets, so both answers occur
        values = rng.integers(0, min(window, 1 << bits), size=n)
        packed = mpi.pack_bits(values, bits).copy()
        if n and rng.random() < 0.5:
            packed[-1] |= np.uint8(rng.integers(0, 256)) & np.uint8(~((1 << ((n * bits) % 8 or 8)) - 1) & 0xFF)
    expected = bool(n) and int(mpi.unpack_bits(packed, bits, n).max()) >= window
    assert mpi.offsets_outside_window(packed, bits, n, window) is expected


def test_pack_bits_reads_a_padded_buffer_in_place() -> None:
    """A uint8 buffer padded to whole words (the encoder's) is packed without copying it, in blocks: beyond the
    packed bytes, pack_bits holds well under one more buffer (it held two: a padded copy and a word-sized
    accumulator). Same bytes as from an unpadded copy."""
    import tracemalloc

    n = 1 << 22
    for bits in (2, 4, 3):
        per = 8 // bits if 8 % bits == 0 else 8
        buf = np.random.default_rng(bits).integers(0, 1 << bits, size=n, dtype=np.uint8)
        assert n % per == 0
        ref = mpi.pack_bits(buf.astype(np.int64), bits)  # the copying path (not uint8)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            out = mpi.pack_bits(buf, bits)
            held = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert held - out.nbytes < n // 4, (bits, held, out.nbytes)
        np.testing.assert_array_equal(out, ref)
        short = mpi.pack_bits(buf[: n - 5], bits)  # uint8, not whole words: the copying path
        np.testing.assert_array_equal(short[: (n - 8) * bits // 8], ref[: (n - 8) * bits // 8])
        np.testing.assert_array_equal(mpi.unpack_bits(out, bits, n), buf)


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_maxpool_decode_holds_little_beyond_its_output(backend: str) -> None:
    """The decoder's table path (2x2 windows: 2 bits, no offset can be outside) checks and looks offsets up on
    the packed bytes: beside its int64 output it holds a few hundred KiB, not the unpacked offsets and np.take's
    widened indices (1.2 MiB more on this [16, 32, 28, 28] tensor before)."""
    import tracemalloc

    shape, params = (16, 32, 56, 56), dict(kernel_shape=[2, 2], strides=[2, 2])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    idx = mpi.reference_indices(x, **params)
    p = dict(input_shape=list(shape), **params)
    with cpu.use_backend(backend):
        payload = tuple(np.ascontiguousarray(a) for a in MAXPOOL.encode(idx, **p))
        MAXPOOL.decode(payload, **p)  # tables built, kernels loaded: not per-call memory
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            out = MAXPOOL.decode(payload, **p)
            held = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    np.testing.assert_array_equal(out, idx)
    assert held - out.nbytes < 384 * 1024, held - out.nbytes


def test_offset_bits() -> None:
    assert [mpi.offset_bits(w) for w in (1, 2, 3, 4, 5, 9, 16, 17, 256, 257)] == [1, 1, 2, 2, 3, 4, 4, 5, 8, 9]


# -- maxpool_index: NumPy round trips -------------------------------------------------------------------
@st.composite
def pool_configs(draw: Any) -> tuple[tuple[int, ...], dict[str, Any]]:
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
            draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))]
    H = draw(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 13))
    W = draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 13))
    params = dict(kernel_shape=[kh, kw], strides=[draw(st.integers(1, 3)), draw(st.integers(1, 3))],
                  pads=pads, dilations=[dh, dw], ceil_mode=draw(st.integers(0, 1)))
    return (draw(st.integers(0, 2)), draw(st.integers(1, 3)), H, W), params


def _roundtrip_maxpool(idx: np.ndarray, params: dict[str, Any]) -> None:
    payload = MAXPOOL.encode(idx, **params)
    assert payload[0].dtype == np.uint8 and tuple(payload[1]) == idx.shape
    assert MAXPOOL.payload_nbytes(payload) == MAXPOOL.predicted_nbytes(idx.shape, **params)
    out = MAXPOOL.decode(payload, **params)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, idx)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_configs(), st.integers(0, 2**32 - 1), st.sampled_from(["random", "int", "const"]))
def test_maxpool_round_trip_hypothesis(cfg: tuple, seed: int, kind: str) -> None:
    shape, params = cfg
    rng = np.random.default_rng(seed)
    x = {"random": lambda: rng.standard_normal(shape),
         "int": lambda: rng.integers(-2, 3, size=shape),
         "const": lambda: np.full(shape, 1.5)}[kind]().astype(np.float32)
    idx = mpi.reference_indices(x, **params)
    _roundtrip_maxpool(idx, dict(input_shape=list(shape), **params))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_configs(), st.integers(0, 2**32 - 1), st.integers(-40, 40))
def test_maxpool_table_path_matches_arithmetic_path(cfg: tuple, seed: int, delta: int) -> None:
    """The NumPy table-lookup path (``fast_tables``) and the arithmetic path accept and reject the same index
    tensors (one index moved by ``delta``) and write the same bytes."""
    shape, params = cfg
    rng = np.random.default_rng(seed)
    idx = mpi.reference_indices(rng.integers(-2, 3, size=shape).astype(np.float32), **params)
    if idx.size and delta:
        idx.reshape(-1)[int(rng.integers(idx.size))] += delta
    p = dict(input_shape=list(shape), **params)
    results = []
    for tables in (mpi.fast_tables, lambda g: None):
        saved, mpi.fast_tables = mpi.fast_tables, tables
        try:
            with cpu.use_backend("numpy"):
                payload = MAXPOOL.encode(idx, **p)
            results.append((payload[0].tobytes(), MAXPOOL.decode(payload, **p).tobytes()))
        except ValueError as exc:
            results.append(("error", "window" in str(exc)))
        finally:
            mpi.fast_tables = saved
    assert results[0] == results[1]


def test_maxpool_sample_inputs_round_trip() -> None:
    for idx, params in MAXPOOL.sample_inputs(np.random.default_rng(0)):
        _roundtrip_maxpool(idx, params)


def test_maxpool_rejects_index_outside_window() -> None:
    shape, params = (2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    idx = mpi.reference_indices(x, **params)
    p = dict(input_shape=list(shape), **params)
    for e, delta in [(0, 2), (5, -2), (7, 8 * 8), (20, 16), (11, -100000)]:
        bad = idx.copy().reshape(-1)
        bad[e] += delta
        with pytest.raises(ValueError, match="window"):
            MAXPOOL.encode(bad.reshape(idx.shape), **p)
    with pytest.raises(ValueError, match="shape"):
        MAXPOOL.encode(idx[:, :, :3], **p)  # wrong params for this tensor
    with pytest.raises(ValueError, match="storage_order"):
        MAXPOOL.encode(idx, storage_order=1, **p)


def test_maxpool_rejects_corrupt_payload() -> None:
    p = dict(input_shape=[1, 1, 6, 6], kernel_shape=[3, 3], strides=[3, 3])
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    idx = mpi.reference_indices(x, kernel_shape=[3, 3], strides=[3, 3])
    packed, shape = MAXPOOL.encode(idx, **p)
    packed = packed.copy()
    packed[0] = 0xFF  # offset 15 in a 9-element window
    with pytest.raises(ValueError, match="corrupt"):
        MAXPOOL.decode((packed, shape), **p)
    with cpu.use_backend("numpy"), pytest.raises(ValueError, match="corrupt"):  # the table path's byte check
        MAXPOOL.decode((packed, shape), **p)
    good = MAXPOOL.encode(idx, **p)[0]
    with cpu.use_backend("numpy"), pytest.raises(ValueError, match="cannot hold"):
        MAXPOOL.decode((good[:-1], shape), **p)


# -- maxpool_index against ONNX Runtime ------------------------------------------------------------------
def _ort_maxpool_indices(x: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["X"], ["Y", "I"], **params)
    graph = helper.make_graph(
        [node], "maxpool", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("I", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 3  # ceil_mode shapes differ from ONNX shape inference: ORT warns, we test
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(["I"], {"X": x})[0]


ORT_CONFIGS = [
    ((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 4, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 2, 7, 10), dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 1, 1])),
    ((1, 2, 11, 9), dict(kernel_shape=[3, 3], strides=[2, 3], dilations=[2, 2], pads=[1, 2, 0, 1])),
    ((1, 3, 5, 5), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 1, 4, 4), dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1)),  # all-pad windows
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[3, 3], pads=[0, 0, 2, 2], ceil_mode=1)),
    ((1, 2, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 8, 7), dict(kernel_shape=[2, 3], strides=[3, 2], dilations=[2, 1], auto_pad="SAME_LOWER")),
    ((1, 2, 8, 7), dict(kernel_shape=[3, 3], auto_pad="VALID", dilations=[2, 2])),
    ((2, 1, 13, 13), dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2])),  # 5-bit offsets
    ((1, 1, 6, 6), dict(kernel_shape=[1, 1], strides=[2, 2])),  # 1-element window -> 1 bit
]


@pytest.mark.parametrize("shape,params", ORT_CONFIGS, ids=[str(i) for i in range(len(ORT_CONFIGS))])
@pytest.mark.parametrize("kind", ["random", "int", "const"])
def test_maxpool_matches_ort_indices(shape: tuple[int, ...], params: dict[str, Any], kind: str) -> None:
    rng = np.random.default_rng(hash((shape, kind)) % 2**32)
    x = {"random": lambda: rng.standard_normal(shape),
         "int": lambda: rng.integers(0, 3, size=shape),  # ties everywhere, ReLU-like zeros
         "const": lambda: np.zeros(shape)}[kind]().astype(np.float32)
    idx = _ort_maxpool_indices(x, params)
    p = dict(input_shape=list(shape), **params)
    assert mpi.geometry(**p).out_shape == idx.shape
    np.testing.assert_array_equal(mpi.reference_indices(x, **params), idx)
    _roundtrip_maxpool(idx, p)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool_configs(), st.integers(0, 2**32 - 1))
def test_maxpool_matches_ort_hypothesis(cfg: tuple, seed: int) -> None:
    shape, params = cfg
    shape = (max(shape[0], 1),) + shape[1:]
    x = np.random.default_rng(seed).integers(-1, 2, size=shape).astype(np.float32)
    idx = _ort_maxpool_indices(x, params)
    _roundtrip_maxpool(idx, dict(input_shape=list(shape), **params))


# -- GPU: same bytes as the CPU, payloads decode on either backend ---------------------------------------
def _sample_inputs(codec: Any, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """A codec's own ``sample_inputs(rng)`` hook, else random float tensors (odd shapes, empty) of its dtype."""
    hook = getattr(codec, "sample_inputs", None)
    if hook is not None:
        return list(hook(rng))
    dtype = np.dtype(codec.input_dtype)
    shapes = [(1,), (7,), (3, 5, 7), (2, 3, 17, 9), (0, 4)]
    return [((np.maximum(rng.standard_normal(s), 0) * (rng.random(s) < 0.4)).astype(dtype), {}) for s in shapes]


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_gpu_bytes_match_cpu(name: str) -> None:
    cp = cupy_or_skip()
    codec = REGISTRY[name]
    for x, params in _sample_inputs(codec, np.random.default_rng(1)):
        cpu_payload = codec.encode(x, **params)
        gpu_payload = codec.encode(cp.asarray(x), **params)
        assert len(gpu_payload) == len(cpu_payload) == len(codec.payload_names)
        for c, g, dt in zip(cpu_payload, gpu_payload, codec.payload_dtypes):
            assert isinstance(g, cp.ndarray)
            g = _host(g)
            assert g.dtype == np.dtype(dt) == c.dtype
            np.testing.assert_array_equal(g, c)
        expected = codec.decode(cpu_payload, **params)
        from_gpu = codec.decode(gpu_payload, **params)  # GPU payload, GPU decode
        np.testing.assert_array_equal(_host(from_gpu), expected)
        cross_cpu = codec.decode(tuple(_host(p) for p in gpu_payload), **params)  # GPU payload on CPU
        np.testing.assert_array_equal(cross_cpu, expected)
        cross_gpu = codec.decode(tuple(cp.asarray(p) for p in cpu_payload), **params)  # CPU payload on GPU
        np.testing.assert_array_equal(_host(cross_gpu), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(5))
def test_gpu_random_shapes_signbits_maxpool(seed: int) -> None:
    cp = cupy_or_skip()
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 40, size=4))
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.1] = np.nan
    for a, b in zip(SIGNBITS.encode(x), SIGNBITS.encode(cp.asarray(x))):
        np.testing.assert_array_equal(_host(b), a)
    k = int(rng.integers(1, 5))
    params = dict(kernel_shape=[k, k], strides=[int(rng.integers(1, 3))] * 2, pads=[k // 2] * 4,
                  ceil_mode=int(rng.integers(0, 2)))
    xi = rng.integers(0, 3, size=shape).astype(np.float32)
    idx = mpi.reference_indices(xi, **params)
    p = dict(input_shape=list(shape), **params)
    for a, b in zip(MAXPOOL.encode(idx, **p), MAXPOOL.encode(cp.asarray(idx), **p)):
        np.testing.assert_array_equal(_host(b), a)
    bad = cp.asarray(idx).reshape(-1)
    bad[0] += 10**6
    with pytest.raises(ValueError, match="window"):
        MAXPOOL.encode(bad.reshape(idx.shape), **p)


# -- relumask: the signbits bitstream, decoded to a bool mask -------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=11),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)))
def test_relumask_decodes_the_relu_mask(x: np.ndarray) -> None:
    mask_codec = get_codec("relumask")
    payload = mask_codec.encode(x)
    for a, b in zip(payload, SIGNBITS.encode(x)):  # same bitstream as signbits
        np.testing.assert_array_equal(a, b)
    mask = mask_codec.decode(payload)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    np.testing.assert_array_equal(mask, x > 0)


@pytest.mark.parametrize("shape,params", [
    ((2, 3, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),      # ResNet stem pool
    ((1, 2, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1])),      # 3-bit offsets
    ((1, 2, 11, 10), dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 2], pads=[0, 1, 1, 0])),
    ((1, 1, 12, 12), dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 0, 0])),    # 2-bit, top/left only
])
def test_maxpool_rejects_outside_tap_of_overhanging_window(shape: tuple[int, ...], params: dict[str, Any]) -> None:
    """In a window that overhangs the input, a tap in the padding has a flat distance that aliases to a real
    element (the row above, the previous plane, or the last column of the row before): the table lookup maps
    it to a valid offset, so only the overhang check (``_Tables.edge_out``) can reject it. Every such alias of
    every overhanging window must raise, at its own flat position, and the clean tensor must round-trip."""
    rng = np.random.default_rng(1)
    idx = mpi.reference_indices(rng.standard_normal(shape).astype(np.float32), **params)
    p = dict(input_shape=list(shape), **params)
    _roundtrip_maxpool(idx, p)
    g = mpi.geometry(**p)
    P, ohw = g.N * g.C, g.OH * g.OW
    cases = 0
    for pos in range(ohw):
        oh, ow = divmod(pos, g.OW)
        h0, w0 = oh * g.sh - g.pt, ow * g.sw - g.pl
        for k in range(g.kh * g.kw):
            h, w = h0 + (k // g.kw) * g.dh, w0 + (k % g.kw) * g.dw
            if 0 <= h < g.H and 0 <= w < g.W:
                continue
            plane = int(rng.integers(P))
            e = plane * ohw + pos
            bad = idx.copy().reshape(-1)
            bad[e] = plane * g.H * g.W + h * g.W + w  # the flat index the tap would have if it existed
            with pytest.raises(ValueError, match=f"flat position {e} is not inside its pooling window"):
                MAXPOOL.encode(bad.reshape(idx.shape), **p)
            cases += 1
    assert cases > 0
