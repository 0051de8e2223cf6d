"""The compiled (numba) CPU kernels: same bytes as the NumPy reference on inputs spanning many parallel tasks,
the backend switch, and both backends inside a real ONNX Runtime training session (same losses, no hang).

The codecs' property tests (test_codecs_*.py) already run against both backends; these add the sizes those
tests never reach (chunk and task boundaries of the parallel kernels)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from onnxcomp.custom_ops import REGISTRY, cpu, get_codec
from onnxcomp.custom_ops import maxpool_index as mpi

numba_only = pytest.mark.skipif(not cpu.numba_available(), reason="numba is not installed")


def _payloads(codec: Any, x: np.ndarray, params: dict[str, Any], backend: str) -> tuple[tuple, np.ndarray]:
    with cpu.use_backend(backend):
        payload = codec.encode_cpu(x, **params)
        return payload, codec.decode_cpu(payload, **params)


def _assert_same(codec: Any, x: np.ndarray, params: dict[str, Any], backend: str = "numba") -> None:
    (ref, y_ref), (got, y) = _payloads(codec, x, params, "numpy"), _payloads(codec, x, params, backend)
    assert len(ref) == len(got)
    for name, a, b in zip(codec.payload_names, ref, got):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), f"{codec.name}: payload {name} differs"
    assert y.dtype == y_ref.dtype and y.shape == y_ref.shape
    assert y.tobytes() == y_ref.tobytes()


def _relu_like(rng: np.random.Generator, n: int) -> np.ndarray:
    """Smooth along the flat index (as feature-map rows are), about half zeros, a few specials."""
    x = np.maximum(np.cumsum(rng.standard_normal(n)) * 0.05 + rng.standard_normal(n) * 0.3, 0).astype(np.float32)
    x[rng.random(n) < 2e-4] = np.nan
    x[rng.random(n) < 1e-4] = -np.inf
    x[rng.random(n) < 1e-3] = -0.0
    return x


@numba_only
@pytest.mark.parametrize("name", sorted(set(REGISTRY) - {"maxpool_index"}))
@pytest.mark.parametrize("n", [3 * 65536 + 4099, 196613])
def test_compiled_bytes_equal_numpy_across_tasks(name: str, n: int) -> None:
    rng = np.random.default_rng(n)
    x = _relu_like(rng, n)
    if name == "csr":
        x[rng.random(n) < 0.9] = 0.0  # CSR territory, with whole empty rows
        x[65536:65536 + 3000] = 0.0
    codec = get_codec(name)
    if codec.input_dtype != "float32":
        pytest.skip(f"{name} encodes {codec.input_dtype}, not activations")
    params = {"sz": {"eb": 1e-2}, "zfp": {"rate": 8}, "intervalmask": {"lo": 0.0, "hi": 0.5}}.get(name, {})
    _assert_same(codec, x, params)
    if name == "sz":  # wide deltas and every element an outlier candidate
        _assert_same(get_codec(name), (rng.standard_normal(n) * 1e4).astype(np.float32), {"eb": 1e-3})


@numba_only
@pytest.mark.parametrize("shape,params", [
    ((8, 64, 32, 32), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((4, 33, 17, 19), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ((2, 40, 30, 30), dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2], dilations=[1, 2])),
    ((1, 8, 40, 40), dict(kernel_shape=[17, 17], strides=[4, 4])),  # 9-bit offsets
])
def test_compiled_maxpool_equal_numpy(shape: tuple[int, ...], params: dict[str, Any]) -> None:
    x = np.random.default_rng(0).integers(-2, 3, size=shape).astype(np.float32)
    idx = mpi.reference_indices(x, **params)
    p = dict(input_shape=list(shape), **params)
    _assert_same(get_codec("maxpool_index"), idx, p)
    bad = idx.copy().reshape(-1)
    bad[bad.size - 5] += 10**6  # in the last parallel task: still reported, at its flat position
    with cpu.use_backend("numba"), pytest.raises(ValueError, match=f"flat position {bad.size - 5} "):
        get_codec("maxpool_index").encode_cpu(bad.reshape(idx.shape), **p)


def test_backend_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    before = cpu.backend()
    with cpu.use_backend("numpy"):
        assert cpu.backend() == "numpy" and cpu.kernels("bits") is None
    assert cpu.backend() == before
    with pytest.raises(ValueError, match="unknown codec backend"):
        cpu.set_backend("fortran")
    monkeypatch.setenv(cpu.ENV_VAR, "numpy")
    assert cpu._default_backend() == "numpy"
    monkeypatch.setenv(cpu.ENV_VAR, "cuda")
    with pytest.raises(ValueError, match=cpu.ENV_VAR):
        cpu._default_backend()
    monkeypatch.delenv(cpu.ENV_VAR)
    assert cpu._default_backend() == ("auto" if cpu.numba_available() else "numpy")


@numba_only
def test_auto_backend_picks_numba_only_where_it_is_faster() -> None:
    with cpu.use_backend("auto"):
        assert cpu.kernels("bits") is None and cpu.kernels("intervalmask") is None
        # NUMBA_WHEN_LOADED: numba's kernels once it is imported, else the AOT-compiled ones
        impl = "numba" if "numba" in sys.modules else "aot"
        assert cpu.backend_for("sparse") == cpu.backend_for("maxpool") == impl
        assert cpu.kernels("sparse") is not None and cpu.kernels("maxpool") is not None
        assert cpu.kernels("sz") is not None and cpu.backend_for("zfp") == cpu.backend_for("dpr") == impl
    with cpu.use_backend("numba"):
        assert cpu.kernels("bits") is not None


_LOSSLESS_ONLY = """
import sys
import numpy as np
from onnxcomp.custom_ops import cpu, get_codec
cpu.warm_up(["signbits", "maxpool_index", "sparse", "zvc", "csr", "relumask", "bitmask", "intervalmask"])
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
for name in ("signbits", "sparse", "zvc", "csr"):
    c = get_codec(name)
    y = np.maximum(x, 0) if name != "signbits" else x
    c.decode_cpu(c.encode_cpu(y))
import torch
_, ind = torch.nn.functional.max_pool2d(torch.from_numpy(x), 2, 2, return_indices=True)
idx = ind.numpy() + (np.arange(8, dtype=np.int64) * 64).reshape(2, 4, 1, 1)
p = dict(input_shape=[2, 4, 8, 8], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])
mp = get_codec("maxpool_index")
assert (mp.decode_cpu(mp.encode_cpu(idx, **p), **p) == idx).all()
print("numba" in sys.modules, cpu.backend(), ",".join(sorted(k for k, v in cpu._modules.items() if v)))
"""


@numba_only
@pytest.mark.parametrize(("setting", "imported", "loaded"), [("", False, "aot:maxpool,aot:sparse"),
                                                          ("numba", True, "bits,intervalmask,maxpool,sparse")])
def test_lossless_codecs_do_not_import_numba_by_default(setting: str, imported: bool, loaded: str) -> None:
    """The default ("auto") runs the lossless codecs with NumPy or, for sparse / maxpool, their AOT-compiled
    kernels, so their process never pays numba's RSS; ONNXCOMP_CODEC_BACKEND=numba still overrides it."""
    env = {k: v for k, v in os.environ.items() if k != cpu.ENV_VAR}
    if setting:
        env[cpu.ENV_VAR] = setting
    out = subprocess.run([sys.executable, "-c", _LOSSLESS_ONLY], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(imported), setting or "auto", loaded]


def test_auto_runs_sparse_with_numba_only_once_it_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under "auto", the AOT_BY_DEFAULT modules (sparse, maxpool, sz, dpr, zfp) use numba when the process
    imported it anyway and their AOT-compiled copies otherwise; bits / intervalmask always NumPy."""
    mods = ("sparse", "maxpool", "sz", "dpr", "zfp", "bits", "intervalmask")
    monkeypatch.setattr(cpu, "_backend", "auto")
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba", object()))
    assert [cpu.backend_for(m) for m in mods] == ["numba"] * 5 + ["numpy"] * 2
    monkeypatch.delitem(sys.modules, "numba")
    assert [cpu.backend_for(m) for m in mods] == ["aot"] * 5 + ["numpy"] * 2
    monkeypatch.setattr(cpu, "_backend", "aot")  # forced: AOT for every kernel module
    assert [cpu.backend_for(m) for m in mods] == ["aot"] * 7
    monkeypatch.setattr(cpu, "_backend", "auto")
    # the planner measures their workspace with NumPy (the larger one), whichever the process would run
    assert [cpu.workspace_backend(c) for c in ("zvc", "sparse", "maxpool_index", "sz")] == \
        ["numpy", "numpy", "numpy", "auto"]
    monkeypatch.setattr(cpu, "_backend", "numba")
    assert cpu.workspace_backend("sparse") == "numba"


@numba_only
@pytest.mark.parametrize("policy", ["lossless", "comet"])
def test_training_session_same_losses_on_both_backends(small_artifacts: Path, tmp_path: Path, policy: str) -> None:
    """The PyOps call the compiled kernels from inside ORT's training step (ORT's own thread pool running):
    no hang, and the same losses bit for bit as with the NumPy codecs, since the payloads are the same."""
    from onnxcomp.runtime.train import train
    from onnxcomp.transform import transform

    out = tmp_path / policy
    options = {"adaptive": False, "eb": 1e-2} if policy == "comet" else {}
    result = transform(small_artifacts, out, policy, min_bytes=0, **options)
    assert result.records
    losses = {}
    for backend in ("numpy", "numba", "aot"):
        with cpu.use_backend(backend):
            losses[backend] = train(out, steps=3, data="synthetic", seed=1, progress=False).losses
    assert losses["numba"] == losses["numpy"] == losses["aot"]
    assert all(np.isfinite(losses["numba"]))


@numba_only
@pytest.mark.parametrize("eb", [0.013, 0.013 * (1 + 2.0 ** -30), 1e-20, 2.0 ** -101, 2.0 ** -100, 2.0 ** 99, 2.0 ** 101])
def test_compiled_sz_float32_fast_path_at_rounding_ties(eb: float) -> None:
    """The sz kernel quantizes in float32 where that provably gives the float64 reference's q and error check
    (custom_ops/cpu/sz.py, fast_recip32): values on, one ulp around and 1e-7 around every tie (k + 1/2)·2eb,
    exact multiples, subnormals, the fast path's |q| limit and scales far outside it (every block then takes
    the float64 path) encode to the NumPy reference's bytes, outliers included."""
    k = np.arange(-3000, 3000, dtype=np.float64)
    tie = ((k + 0.5) * 2 * eb).astype(np.float32)
    x = np.concatenate([np.nextafter(tie, np.float32(np.inf)), tie, np.nextafter(tie, np.float32(-np.inf)),
                        ((k + 0.5) * 2 * eb * (1 + 1e-7)).astype(np.float32),
                        ((k + 0.5) * 2 * eb * (1 - 1e-7)).astype(np.float32), (k * 2 * eb).astype(np.float32),
                        np.full(64, 1e-44, np.float32), np.float32(2 * eb * 2.0 ** 22) + np.arange(-32, 32) * 0.5])
    with np.errstate(over="ignore", invalid="ignore"):
        for scale in (1.0, 1e-20, 1e20):
            _assert_same(get_codec("sz"), (x * np.float32(scale)).astype(np.float32), {"eb": eb})


def _blocks_of_rates(rng: np.random.Generator, rates: np.ndarray) -> np.ndarray:
    """float32 integers (exact quantization at eb = 0.5: q = x) whose block-reset Lorenzo deltas have, per
    32-element block, exactly the bit width in ``rates`` (r = 0: an all-zero block)."""
    r = rates.astype(np.int64)[:, None]
    mag = rng.integers(0, 1 << 30, size=(rates.size, 32)) % np.maximum(1 << r, 1)   # |d| < 2^r
    top = rng.integers(0, 32, size=rates.size)
    mag[np.arange(rates.size), top] |= np.where(r[:, 0] > 0, 1 << np.maximum(r[:, 0] - 1, 0), 0)  # width r
    d = mag * rng.choice([-1, 1], size=mag.shape)
    return np.cumsum(d, axis=1).reshape(-1).astype(np.float32)


@numba_only
def test_compiled_sz_wide_blocks_and_scratch_overflow() -> None:
    """The sz kernel's byte-lane paths for 8 < r <= 16 (pack and unpack with two byte planes per lane) and
    pass 2 of a task whose words overflow its scratch part-way (the blocks that fit are copied, the rest
    re-quantized): bytes and decode equal the NumPy reference's. Task 0 mixes every width 0..24 and
    overflows its scratch after a few hundred blocks; task 1 is narrow (fits); the partial last task is all
    9..16 bits (what ReLU activations at eb ~ 1e-3 give) and overflows too."""
    from onnxcomp.custom_ops.cpu import sz as ksz

    rng = np.random.default_rng(7)
    tb = ksz.TASK_BLOCKS
    rates = np.concatenate([np.arange(tb) % 25, rng.integers(0, 5, tb), rng.integers(9, 17, 1500)]).astype(np.uint8)
    x = _blocks_of_rates(rng, rates)
    x = x[:x.size - 13]  # a partial last block
    with cpu.use_backend("numba"):
        got_rates = get_codec("sz").encode_cpu(x, eb=0.5)[1]
    assert np.array_equal(got_rates[:-1], rates[:-1])  # the widths the test means to cover
    words = np.where(rates > 0, rates.astype(np.int64) + 1, 0)
    cap = tb * ksz.SCRATCH_WORDS_PER_BLOCK
    first_over = [int(np.argmax(np.cumsum(words[t * tb:(t + 1) * tb]) > cap)) for t in (0, 2)]
    assert all(0 < b for b in first_over) and words[tb:2 * tb].sum() <= cap
    _assert_same(get_codec("sz"), x, {"eb": 0.5})
    _assert_same(get_codec("sz"), x * np.float32(1e-3), {"eb": 0.5e-3})  # inexact quantization, same widths


@numba_only
@pytest.mark.parametrize("n", [0, 1, 7, 8, 2048, 2048 + 5, 2 * 65536 + 13])
def test_compiled_zvc_count_packs_every_byte_pattern(n: int) -> None:
    """The numba ZVC count pass packs eight nonzero flags per bitmap byte by one multiply: every byte pattern
    (cycled), partial last bytes and task boundaries give ``np.packbits``'s bitmap and the bitwise count;
    -0.0, NaN and the smallest subnormal count as nonzero."""
    from onnxcomp.custom_ops.cpu import sparse as ksparse

    flags = np.unpackbits(np.arange(256, dtype=np.uint8), bitorder="little").astype(bool)
    flags = np.resize(flags, n) if n else flags[:0]
    specials = np.array([1.0, -0.0, np.nan, 1e-45, -np.inf], np.float32).view(np.uint32)
    words = np.where(flags, specials[np.arange(n) % specials.size], np.uint32(0)).astype(np.uint32)
    bitmap, starts = ksparse.zvc_count(words)
    assert bitmap.tobytes() == np.packbits(flags, bitorder="little").tobytes()
    assert int(starts[-1]) == int(np.count_nonzero(words))
    np.testing.assert_array_equal(ksparse.zvc_decode(bitmap, ksparse.zvc_finish(words, starts), n), words)


@numba_only
@pytest.mark.parametrize("shape,params", [
    ((3, 7, 5, 9), dict(kernel_shape=[2, 2], strides=[1, 1])),                         # one task, odd plane
    ((1, 3, 300, 300), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # a plane per task
    ((2, 5, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1], ceil_mode=1)),  # empty windows
    ((0, 3, 6, 6), dict(kernel_shape=[2, 2], strides=[2, 2])),
])
def test_compiled_maxpool_offsets_equal_numpy(shape: tuple[int, ...], params: dict[str, Any]) -> None:
    """cpu/maxpool.py's table lookup (the NUMBA_WHEN_LOADED encoder) writes the NumPy table path's bytes and
    rejects the same tensors at the same flat position: task boundaries, a plane larger than a task, ORT's
    empty-window sentinel, extreme int64 values (the subtraction wraps as NumPy's does)."""
    rng = np.random.default_rng(3)
    idx = mpi.reference_indices(rng.integers(-2, 3, size=shape).astype(np.float32), **params)
    p = dict(input_shape=list(shape), **params)
    assert mpi.fast_tables(mpi.geometry(**p)) is not None
    _assert_same(get_codec("maxpool_index"), idx, p)
    for value in (np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, 2**32, 1):
        if not idx.size:
            break
        bad = idx.copy().reshape(-1)
        e = int(rng.integers(bad.size))
        if bad[e] == value:
            continue
        bad[e] = value
        errors = []
        for backend in ("numpy", "numba"):
            with cpu.use_backend(backend), pytest.raises(ValueError) as info:
                get_codec("maxpool_index").encode_cpu(bad.reshape(idx.shape), **p)
            errors.append(str(info.value))
        assert errors[0] == errors[1] and f"flat position {e} " in errors[0]


_WARM_ORDER = """
import sys
from onnxcomp.custom_ops import cpu
cpu.warm_up(["maxpool_index", "sparse", "sz", "zfp", "dpr_fp8"])
print(" ".join(sorted(k for k, v in cpu._modules.items() if v)), "numba" in sys.modules)
"""


@numba_only
@pytest.mark.parametrize(("setting", "loaded"), [("", "aot:dpr aot:maxpool aot:sparse aot:sz aot:zfp False"),
                                                 ("numba", "bits dpr maxpool sparse sz zfp True")])
def test_warm_up_loads_every_kernel_a_lossy_graph_runs(setting: str, loaded: str) -> None:
    """A lossy graph (zfp, sz, dpr, maxpool_index, sparse): warm_up loads every kernel module the first step
    calls, by default AOT-compiled without importing numba; ONNXCOMP_CODEC_BACKEND=numba: the JIT kernels."""
    env = {k: v for k, v in os.environ.items() if k != cpu.ENV_VAR}
    if setting:
        env[cpu.ENV_VAR] = setting
    out = subprocess.run([sys.executable, "-c", _WARM_ORDER], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == loaded


@numba_only
@pytest.mark.parametrize("shape,params", [
    ((8, 64, 32, 32), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((4, 33, 17, 19), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
])
def test_aot_maxpool_equal_numpy(shape: tuple[int, ...], params: dict[str, Any]) -> None:
    x = np.random.default_rng(0).integers(-2, 3, size=shape).astype(np.float32)
    idx = mpi.reference_indices(x, **params)
    p = dict(input_shape=list(shape), **params)
    with cpu.use_backend("aot"):
        assert cpu.kernels("maxpool") is not None
    _assert_same(get_codec("maxpool_index"), idx, p, backend="aot")
    bad = idx.copy().reshape(-1)
    bad[bad.size - 5] += 10**6
    with cpu.use_backend("aot"), pytest.raises(ValueError, match=f"flat position {bad.size - 5} "):
        get_codec("maxpool_index").encode_cpu(bad.reshape(idx.shape), **p)


def test_aot_build_failure_falls_back_to_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No C compiler / no numba.pycc: the module runs with NumPy (a warning says why), same bytes."""
    from onnxcomp.custom_ops.cpu import aot

    monkeypatch.setattr(aot, "_failed", set())
    monkeypatch.setattr(aot, "cache_dirs", lambda: [])  # nowhere to find or build the extension
    monkeypatch.setattr(cpu, "_modules", {})
    with cpu.use_backend("aot"), pytest.warns(RuntimeWarning, match="ahead-of-time"):
        assert cpu.kernels("sparse") is None
    with cpu.use_backend("aot"):
        assert cpu.kernels("sparse") is None  # remembered: no second attempt, no second warning
    x = _relu_like(np.random.default_rng(0), 5000)
    (ref, _), (got, _) = _payloads(get_codec("zvc"), x, {}, "numpy"), _payloads(get_codec("zvc"), x, {}, "aot")
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ref, got))


# Every codec's kernels under the AOT backend (aot.MODULES: sparse, maxpool, sz, dpr, bits, intervalmask, zfp):
# flat inputs spanning many (serial) tasks, and edge sizes (empty, one element, a partial last byte / block).
_AOT_PARAMS = {"sz": [{"eb": 1e-2}, {"eb": 1e-4}], "zfp": [{"rate": 8}, {"rate": 5}, {"rate": 16}],
               "intervalmask": [{"lo": 0.0, "hi": 0.5}], "q8": [{"layout": "rows"}], "q8h": [{"layout": "rows"}]}


def _aot_input(name: str, x: np.ndarray) -> np.ndarray:
    return x > 0 if get_codec(name).input_dtype == "bool" else x


@numba_only
@pytest.mark.parametrize("name", sorted(set(REGISTRY) - {"maxpool_index"}))
@pytest.mark.parametrize("n", [3 * 65536 + 4099, 0, 1, 7, 4099])
def test_aot_bytes_equal_numpy(name: str, n: int) -> None:
    """The AOT-compiled kernels (single-threaded, loaded without numba) write NumPy's bytes."""
    rng = np.random.default_rng(n)
    x = _relu_like(rng, n)
    if name == "csr":
        x[rng.random(n) < 0.9] = 0.0
        x[65536:65536 + 3000] = 0.0
    module = {"zvc": "sparse", "csr": "sparse", "signbits": "bits", "relumask": "bits", "bitmask": "bits",
              "sz": "sz", "zfp": "zfp", "intervalmask": "intervalmask"}.get(name, "dpr" if "dpr" in name else None)
    if module is not None:
        with cpu.use_backend("aot"):
            assert cpu.kernels(module) is not None, f"AOT build of {module} failed (see the warning)"
    for params in _AOT_PARAMS.get(name, [{}]):
        _assert_same(get_codec(name), _aot_input(name, x), params, backend="aot")
    if name == "sz" and n:  # wide deltas and every element an outlier candidate
        _assert_same(get_codec(name), (rng.standard_normal(n) * 1e4).astype(np.float32), {"eb": 1e-3}, "aot")


@numba_only
@pytest.mark.parametrize("name", ["zfp", "sz", "dpr_fp16", "dpr_bf16", "dpr_fp8", "dpr_fp10", "signbits", "relumask",
                                  "bitmask", "intervalmask", "sparse"])
@pytest.mark.parametrize("shape", [(8, 16, 24, 24), (3, 5, 7, 13), (2, 3, 1, 1), (1, 1, 4, 4), (4, 33, 9, 130)])
def test_aot_maps_equal_numpy(name: str, shape: tuple[int, ...]) -> None:
    """4-D feature maps: zfp's 2-D blocks with partial block rows / columns, NaN / Inf out of band, every rate
    class (1-D-like narrow maps, sparse pack from six words a block on)."""
    rng = np.random.default_rng(sum(shape))
    x = _relu_like(rng, int(np.prod(shape))).reshape(shape)
    params = _AOT_PARAMS.get(name, [{}])
    if name == "zfp":
        params = [{"rate": r} for r in (3, 4, 7, 8, 12, 13, 16, 24, 32)]
    for p in params:
        _assert_same(get_codec(name), _aot_input(name, x), p, backend="aot")
    if name == "zfp":  # a finite map: the kernel's own pass, no out-of-band values
        _assert_same(get_codec(name), np.nan_to_num(x, nan=0.0, neginf=-1.0), {"rate": 8}, backend="aot")


@numba_only
def test_aot_copy_runs_the_code_compiled_at_build_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The AOT copy executes the module's code object marshalled at build time, not its source: compiling
    _zfp_numba.py's 1,750 lines in every process (no .pyc where PYTHONDONTWRITEBYTECODE is set) cost ~5 MiB of
    set-up RSS and +1.3 MiB of training-step growth on ResNet-18's zfp plan (docs/notes/aotlossy.md)."""
    import importlib.machinery

    from onnxcomp.custom_ops.cpu import aot

    with cpu.use_backend("aot"):
        assert cpu.kernels("zfp") is not None

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("kernel source compiled at load")

    monkeypatch.setattr(importlib.machinery.SourceFileLoader, "get_code", refuse)
    monkeypatch.setattr("builtins.compile", refuse)
    mod = aot.load("zfp")
    assert mod is not None and callable(mod.encode) and mod.__name__.endswith("._aot_zfp")


@numba_only
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_aot_zfp_split_over_threads_same_bytes(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu.run_chunks splits one AOT zfp call into contiguous chunk ranges run on several threads (the entry
    points release the GIL): the words, the NaN / Inf report of any chunk and the decode stay NumPy's."""
    with cpu.use_backend("aot"):
        ns = cpu.kernels("zfp")
    assert ns is not None
    monkeypatch.setattr(ns, "threads", threads)
    rng = np.random.default_rng(threads)
    x = _relu_like(rng, 4 * 33 * 40 * 130).reshape(4, 33, 40, 130)  # 341 tasks of 128 blocks: 64 chunks
    for p in ({"rate": 12}, {"rate": 5}):
        _assert_same(get_codec("zfp"), x, p, backend="aot")
        _assert_same(get_codec("zfp"), np.nan_to_num(x, nan=0.0, neginf=0.0), p, backend="aot")
    _assert_same(get_codec("zfp"), x.reshape(-1)[:70001], {"rate": 7}, backend="aot")  # 1-D blocks


def test_aot_signatures_parse() -> None:
    from onnxcomp.custom_ops.cpu import _jit

    assert _jit.array_args("void(u1[::1], u4[:, ::1], i8, f4[:, :, ::1], b1)") == \
        [("uint8", 1), ("uint32", 2), None, ("float32", 3), None]
    with pytest.raises(ValueError, match="C-contiguous"):
        _jit.array_args("void(u1[:])")


@numba_only
def test_aot_kernel_refuses_wrong_dtype() -> None:
    """pycc's entry points do not check dtypes (a uint8 array read as uint32 runs out of bounds): the AOT
    binding does, and picks among several signatures by dtype."""
    from onnxcomp.custom_ops.cpu import _jit, aot

    with cpu.use_backend("aot"):
        assert cpu.kernels("bits") is not None and cpu.kernels("zfp") is not None
    mod = aot.load("bits")
    with pytest.raises(TypeError, match="no ahead-of-time signature"):
        mod._signbits_encode(np.zeros(8, np.float64), np.zeros(1, np.uint8))
    with pytest.raises(TypeError, match="no ahead-of-time signature"):
        mod._signbits_encode(np.zeros(16, np.float32)[::2], np.zeros(1, np.uint8))  # not contiguous
    bits = np.array([0b101], np.uint8)
    assert mod.signbits_decode(bits, 3, np.bool_).tolist() == [True, False, True]
    assert mod.signbits_decode(bits, 3, np.float32).tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(RuntimeError, match="only callable from compiled kernels"):
        aot.load("zfp")._cdiv(1, 2, 3)  # a helper linked into the kernels, no entry point of its own
    assert _jit.AOT_LIB is None and "numba" not in vars(aot.load("zfp"))


_AOT_SIGNATURE_CHECK = r"""
import json, sys
import numpy as np
from onnxcomp.custom_ops import REGISTRY, cpu
from onnxcomp.custom_ops.cpu import aot
from numba.core import sigutils

exec(sys.argv[1])  # activations(codec, rng), from _WARM_COVERAGE
cpu.set_backend("numba")
for codec in REGISTRY.values():
    for x, p in activations(codec, np.random.default_rng(1)):
        codec.decode_cpu(codec.encode_cpu(x, **p), **p)
problems = []
for name, src in aot.SOURCES.items():
    mod = sys.modules[f"{aot._PACKAGE}.{src}"]
    declared = {}
    for fn, sig in mod.AOT_SIGNATURES.items():
        if not hasattr(getattr(mod, fn, None), "py_func"):
            problems.append(f"{name}: AOT_SIGNATURES names {fn}, not a kernel")
        declared[fn] = {sigutils.normalize_signature(s)[0] for s in ([sig] if isinstance(sig, str) else sig)}
    for key, fn in vars(mod).items():
        if not hasattr(fn, "py_func") or not fn.signatures or getattr(fn, "targetoptions", {}).get("inline") == "always":
            continue
        for s in fn.signatures:
            if key not in declared:
                problems.append(f"{name}.{key}{s}: called with no AOT signature")
            elif tuple(s) not in declared[key]:
                problems.append(f"{name}.{key}{s}: not among {sorted(map(str, declared[key]))}")
print(json.dumps(problems))
"""


@numba_only
def test_aot_signatures_cover_what_the_wrappers_pass() -> None:
    """Every signature the JIT kernels are compiled for by real-looking activations of every codec (i.e. every
    type combination the wrappers pass) is one the AOT extension exports. Kernel helpers called only from other
    kernels show up here too (numba types them from the caller); they must then be listed or be inlined."""
    activations = _WARM_COVERAGE.split("def activations")[1].split("\ndef scenario")[0]
    pooled = _WARM_COVERAGE.split("def pooled_indices")[1].split("\ndef activations")[0]
    code = "def pooled_indices" + pooled + "\ndef activations" + activations
    env = {k: v for k, v in os.environ.items() if k != cpu.ENV_VAR}
    out = subprocess.run([sys.executable, "-c", _AOT_SIGNATURE_CHECK, code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
    assert json.loads(out) == []


_WARM_COVERAGE = r"""
import json, os, sys
import numpy as np
from onnxcomp.custom_ops import REGISTRY, cpu

def signatures():
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(("custom_ops", "onnxcomp.custom_ops")):
            continue
        for key, fn in list(vars(mod).items()):
            sigs = getattr(fn, "signatures", None)
            if isinstance(sigs, list) and hasattr(fn, "py_func"):
                out[f"{name}.{key}"] = {str(s) for s in sigs}
    return out

def pooled_indices(x, k, s):
    # Flat argmax indices of a k x k / stride s max pool over NCHW (ORT's MaxPool Indices).
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    flat = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    best = np.full((n, c, oh, ow), -np.inf, dtype=np.float32)
    idx = np.zeros((n, c, oh, ow), dtype=np.int64)
    for i in range(k):
        for j in range(k):
            v = x[:, :, i:i + s * oh:s, j:j + s * ow:s]
            take = v > best
            best = np.where(take, v, best)
            idx = np.where(take, flat[:, :, i:i + s * oh:s, j:j + s * ow:s], idx)
    return idx, dict(input_shape=list(x.shape), kernel_shape=[k, k], strides=[s, s], pads=[0, 0, 0, 0])

def activations(codec, rng):
    # What a training step hands the encoders: 4-D maps, ReLU outputs (about half zeros), dense
    # pre-activations, nearly empty maps; each with every parameter set the codec's samples use.
    relu = np.maximum(rng.standard_normal((8, 16, 24, 24)), 0).astype(np.float32)
    dense = rng.standard_normal((4, 32, 9, 9)).astype(np.float32)
    empty = relu * (rng.random(relu.shape) < 0.03)
    if codec.name == "maxpool_index":
        for k, s in ((2, 2), (3, 2)):
            yield pooled_indices(relu, k, s)
        return
    if codec.input_dtype == "bool":
        yield relu > 0, {}
        return
    shape_keys = {"input_shape", "kernel_shape", "strides", "pads"}
    seen = []
    for _, p in codec.sample_inputs(np.random.default_rng(0)):
        if not shape_keys & set(p) and p not in seen:
            seen.append(p)
    for p in seen or [{}]:
        for x in (relu, dense, empty):
            yield x, p

def scenario(names, target):
    cpu.warm_up(names)
    before = signatures()
    codec = REGISTRY[target]
    for x, p in activations(codec, np.random.default_rng(1)):
        codec.decode_cpu(codec.encode_cpu(x, **p), **p)
    after = signatures()
    return sorted(f"{k}{sorted(v - before.get(k, set()))}" for k, v in after.items() if v - before.get(k, set()))

results = {}
for names, target in json.loads(sys.argv[1]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fresh copy of this process: nothing compiled or loaded yet
        os.close(r)
        os.write(w, json.dumps(scenario(names, target)).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        results["+".join(names) + " -> " + target] = json.loads(f.read())
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


@numba_only
def test_warm_up_compiles_every_kernel_a_step_calls() -> None:
    """After ``warm_up(codecs of a graph)``, encoding and decoding real-looking activations compiles nothing: a
    kernel first met inside a training step compiles there and numba's compiler memory lands in that step's
    measured peak (squeezenet_s's lossy plan, ORT defaults: +11-13 MiB when sparse's ZVC kernels were reached
    only by samples the warm-up skipped). Each graph's warm-up runs in a forked copy of a fresh process."""
    kernel_codecs = ["dpr_fp16", "dpr_fp8", "dpr_bf16", "sz", "zfp", "sparse", "zvc", "csr", "maxpool_index"]
    scenarios = [([c], c) for c in kernel_codecs]
    # Graphs with zfp / sz and the sparse / maxpool_index codecs.
    scenarios += [(["maxpool_index", "sparse", "zfp"], t) for t in ("sparse", "maxpool_index")]
    scenarios += [(["sparse", "sz"], "sparse")]
    # numba's JIT kernels (they compile on first call; the default AOT ones are built whole, and loaded by
    # warm_up: test_warm_up_loads_every_kernel_a_lossy_graph_runs).
    env = {**{k: v for k, v in os.environ.items() if k != cpu.ENV_VAR}, cpu.ENV_VAR: "numba"}
    out = subprocess.run([sys.executable, "-c", _WARM_COVERAGE, json.dumps(scenarios)], env=env,
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    compiled_in_step = {k: v for k, v in json.loads(out).items() if v}
    assert not compiled_in_step, compiled_in_step
