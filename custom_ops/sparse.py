"""Lossless sparse codecs for stashed float32 activations: ZVC and narrow-index CSR.

* ``zvc`` — zero-value compression (cDMA; CSWAP+ §5.2.1): a 1-bit-per-element nonzero bitmap plus the
  nonzero values packed in element order. Its n/8 bytes of metadata do not depend on density, so it is
  smaller than dense below ~97% nonzeros.
* ``csr`` — Gist's Sparse Storage / Dense Compute (ISCA'18 §IV-A) with its "Narrow Value Optimization":
  the flattened tensor is viewed as rows of 256 elements, so each column index fits in one uint8 byte.
  Costs 1 byte per nonzero (+4 bytes per 256-element row), so it beats ZVC only below ~11% density.

"Nonzero" is bitwise throughout: an element is stored iff its bit pattern differs from +0.0, so -0.0,
NaN payloads and infinities round-trip exactly. Both backends move elements as uint32 words, never as
floats, so nothing can canonicalise a NaN. Both codecs store values in flattened C order, so their
``values`` arrays are identical. Size formulas and the chooser are in ``sparse_select``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import cpu, gpu
from .base import Codec, Payload, register

CSR_ROW = 256  # columns per CSR row: the largest row whose column index fits in uint8
# The kernels give each block of gpu.BLOCK threads one 256-element tile (ZVC_TILE) / row (CSR_ROW).
_TILE = 256
if gpu.BLOCK != _TILE:
    raise ImportError(f"sparse kernels need {_TILE}-thread blocks, gpu.BLOCK is {gpu.BLOCK}")
_INT32_MAX = int(np.iinfo(np.int32).max)


# -- shared helpers ---------------------------------------------------------------------------------------
_CHUNK = 1 << 18  # elements per CPU chunk; a multiple of 8 keeps bitmap chunks byte-aligned


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _ntiles(n: int) -> int:
    return -(-n // _TILE)


_ZVC_K = 4  # tiles per block step in kernels/zvc.cu (ZVC_K)


def _zvc_threads(ntiles: int) -> int:
    """Threads to launch for the tile kernels of zvc.cu: a block of _TILE threads per _ZVC_K tiles."""
    return -(-ntiles // _ZVC_K) * _TILE


def _nnz_from_stats(n: int, stats: dict[str, Any]) -> int:
    """Nonzero count from ``nnz=`` (exact) or ``density=`` (fraction of nonzero elements, rounded)."""
    if stats.get("nnz") is not None:
        nnz = int(stats["nnz"])
    elif stats.get("density") is not None:
        nnz = int(round(float(stats["density"]) * n))
    else:
        raise TypeError("predicted_nbytes needs density= or nnz=")
    if not 0 <= nnz <= n:
        raise ValueError(f"nnz {nnz} outside [0, {n}]")
    return nnz


def _zvc_payload(xp: Any, payload: Payload) -> tuple[Any, Any, tuple[int, ...], int]:
    """A ZVC payload as flat uint8 bitmap and uint32 words (NumPy or CuPy ``xp``), its shape and size;
    a bitmap of the wrong length is rejected."""
    bitmap, values, shape_arr = payload
    shape = gpu.host_shape(shape_arr)
    n = _numel(shape)
    bitmap = xp.ascontiguousarray(bitmap, dtype=xp.uint8).reshape(-1)
    if bitmap.size != (n + 7) // 8:
        raise ValueError(f"zvc: {bitmap.size}-byte bitmap cannot describe shape {shape}")
    return bitmap, xp.ascontiguousarray(values, dtype=xp.float32).reshape(-1).view(xp.uint32), shape, n


def _csr_payload(xp: Any, payload: Payload) -> tuple[Any, Any, Any, tuple[int, ...], int, int]:
    """A CSR payload as flat uint32 words, uint8 cols, int32 row_ptr (NumPy or CuPy ``xp``), its shape, size
    and row count. Rejected unless row_ptr indexes values/cols validly for that shape (starts at 0, ends at
    the value count, never decreases, at most 256 per row, no column past the end of a short last row): both
    decoders index with it, so a corrupt one must not read or write out of bounds."""
    values, cols, row_ptr, shape_arr = payload
    shape = gpu.host_shape(shape_arr)
    n = _numel(shape)
    nrows = _ntiles(n)
    words = xp.ascontiguousarray(values, dtype=xp.float32).reshape(-1).view(xp.uint32)
    cols = xp.ascontiguousarray(cols, dtype=xp.uint8).reshape(-1)
    row_ptr = xp.ascontiguousarray(row_ptr, dtype=xp.int32).reshape(-1)
    if row_ptr.size != nrows + 1 or words.size != cols.size:
        raise ValueError(f"csr: row_ptr/values/cols sizes do not describe shape {shape}")
    first, last_start, total = (int(v) for v in row_ptr[[0, max(nrows - 1, 0), nrows]].tolist())  # one sync
    counts = xp.diff(row_ptr.astype(xp.int64))
    last_len = n - (nrows - 1) * CSR_ROW
    if first != 0 or total != words.size or bool((counts < 0).any()) or bool((counts > CSR_ROW).any()) or \
            (nrows and bool((cols[last_start:total] >= last_len).any())):
        raise ValueError(f"csr: row_ptr/cols do not index the {words.size} values stored for shape {shape}")
    return words, cols, row_ptr, shape, n, nrows


def _cpu_words(x: np.ndarray) -> np.ndarray:
    """Flat uint32 view of a float32 array (copies only if it is not C-contiguous)."""
    if x.dtype != np.float32:
        raise TypeError(f"sparse codecs encode float32 tensors, got {x.dtype}")
    return np.ascontiguousarray(x).reshape(-1).view(np.uint32)


def _gpu_words(x: Any) -> Any:
    import cupy as cp

    if x.dtype != cp.float32:
        raise TypeError(f"sparse codecs encode float32 tensors, got {x.dtype}")
    return cp.ascontiguousarray(x).reshape(-1).view(cp.uint32)


def _sample_inputs(rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """(tensor, params) cases for generic codec tests: odd sizes, empty, 0-d, specials, sparse/dense."""
    def sparse(shape: tuple[int, ...], density: float) -> np.ndarray:
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) >= density] = 0.0
        return x

    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.0], dtype=np.float32)
    nan_payload = np.array([0x7FC00001, 0xFF800123, 0x80000000, 0], dtype=np.uint32).view(np.float32)
    cases = [sparse(s, d) for s, d in [((1,), 1.0), ((7,), 0.5), ((3, 5, 7), 0.3), ((2, 3, 17, 9), 0.1),
                                       ((257,), 0.02), ((0, 4), 0.5)]]
    cases += [special, nan_payload, np.zeros((4, 9), np.float32), np.ones((33,), np.float32),
              np.float32(2.5).reshape(())]
    return [(c, {}) for c in cases]


# -- ZVC --------------------------------------------------------------------------------------------------
@register
class ZVC(Codec):
    """Payload: bitmap uint8[ceil(n/8)] (element i in bit i%8 of byte i//8, i.e. ``np.packbits`` little bit
    order, padding bits 0), values float32[nnz] (nonzero elements in flattened C order), shape int64[ndim].
    """

    name = "zvc"
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("bitmap", "values", "shape")
    payload_dtypes = ("uint8", "float32", "int64")
    kernel_file = "zvc.cu"

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        n = _numel(tuple(shape))
        return (n + 7) // 8 + 4 * _nnz_from_stats(n, stats) + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        return _sample_inputs(rng)

    # -- NumPy: boolean-mask compress / assignment per chunk (numpy 2: as fast as flatnonzero + take) --
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        return self.encode_cpu_counted(x, None)

    def encode_cpu_counted(self, x: np.ndarray, nnz: int | None) -> Payload:
        """encode_cpu with the bitwise nonzero count already known (``sparse`` counted to choose its mode)."""
        words = _cpu_words(x)
        if (k := cpu.kernels("sparse")) is not None:
            bitmap, values = k.zvc_encode(words)
            return bitmap, values.view(np.float32), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        n = int(words.size)
        values = np.empty(int(np.count_nonzero(words)) if nnz is None else nnz, dtype=np.uint32)
        bitmap = np.empty((n + 7) // 8, dtype=np.uint8)
        mask = np.empty(min(n, _CHUNK), dtype=bool)
        pos = 0
        # Chunks bound the temporaries (mask, the picked values) to a few MiB: inside a training step these
        # transients add to the activation peak the codec is there to cut.
        for c0 in range(0, n, _CHUNK):
            w = words[c0:c0 + _CHUNK]
            m = mask[:w.size]
            np.not_equal(w, 0, out=m)
            bitmap[c0 // 8:(c0 + w.size + 7) // 8] = np.packbits(m, bitorder="little")
            # Boolean compress (~1.2 ns per element at 50 % density, most of this loop's time). A gather
            # through np.flatnonzero into ``values`` measured ~15 % faster alone but no faster end to end, and
            # its int64 positions double the chunk's transient (the planner's measured workspace): not taken.
            picked = w[m]
            if pos + picked.size > values.size:
                raise ValueError(f"zvc: nnz={nnz} given, but the tensor has more nonzeros")
            values[pos:pos + picked.size] = picked
            pos += picked.size
        if pos != values.size:
            raise ValueError(f"zvc: nnz={nnz} given, but the tensor has {pos} nonzeros")
        return bitmap, values.view(np.float32), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        bitmap, words, shape, n = _zvc_payload(np, payload)
        if (k := cpu.kernels("sparse")) is not None:
            return k.zvc_decode(bitmap, words, n).view(np.float32).reshape(shape)
        out = np.zeros(n, dtype=np.uint32)
        pos = 0
        for c0 in range(0, n, _CHUNK):
            c1 = min(n, c0 + _CHUNK)
            # .view(bool): boolean assignment wants a bool mask (unpackbits gives uint8)
            mask = np.unpackbits(bitmap[c0 // 8:(c1 + 7) // 8], count=c1 - c0, bitorder="little").view(bool)
            k = int(np.count_nonzero(mask))
            if pos + k > words.size:
                raise ValueError(f"zvc: bitmap marks more nonzeros than the {words.size} values stored")
            out[c0:c1][mask] = words[pos:pos + k]  # boolean assignment: ~30 % faster than via flatnonzero
            pos += k
        if pos != words.size:
            raise ValueError(f"zvc: bitmap marks {pos} nonzeros but {words.size} values were stored")
        return out.view(np.float32).reshape(shape)

    # -- CuPy: per-tile popcounts -> exclusive scan (cupy.cumsum) -> ballot-based scatter ---------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        counted = self.gpu_count(x)
        return self.gpu_finish(counted)

    def gpu_count(self, x: Any) -> tuple[Any, ...]:
        """Encode pass 1 (bitmap + per-tile counts) and the exact nonzero count: ``sparse`` picks its mode
        from this count, so a ZVC payload costs no separate counting pass."""
        import cupy as cp

        shape = tuple(x.shape)
        words = _gpu_words(x)
        n = int(words.size)
        ntiles = _ntiles(n)
        bitmap = cp.empty((n + 7) // 8, dtype=cp.uint8)
        counts = cp.empty(ntiles, dtype=cp.int32)
        gpu.launch(self.kernel_file, "zvc_encode_count", _zvc_threads(ntiles),
                   (words, gpu.i64(n), bitmap, gpu.i64(bitmap.size), counts, gpu.i64(ntiles)))
        incl = cp.cumsum(counts, dtype=cp.int64)
        nnz = int(incl[-1]) if ntiles else 0  # the one device->host sync: sizes the values array
        return words, shape, bitmap, counts, incl, nnz

    def gpu_finish(self, counted: tuple[Any, ...]) -> Payload:
        """Encode pass 2 (scatter of the nonzero words) after ``gpu_count``."""
        import cupy as cp

        words, shape, bitmap, counts, incl, nnz = counted
        ntiles = int(counts.size)
        values = cp.empty(nnz, dtype=cp.uint32)
        if nnz:
            gpu.launch(self.kernel_file, "zvc_encode_scatter", _zvc_threads(ntiles),
                       (words, gpu.i64(int(words.size)), incl - counts, values, gpu.i64(ntiles)))
        return bitmap, values.view(cp.float32), gpu.shape_array(shape)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        bitmap, words, shape, n = _zvc_payload(cp, payload)
        ntiles = _ntiles(n)
        counts = cp.empty(ntiles, dtype=cp.int32)
        gpu.launch(self.kernel_file, "zvc_decode_count", ntiles,  # a thread per tile
                   (bitmap, gpu.i64(n), counts, gpu.i64(ntiles)))
        incl = cp.cumsum(counts, dtype=cp.int64)
        # One device->host sync: a bitmap marking more nonzeros than were stored would read past the values.
        # check=False skips it for payloads this process just made (onnxcomp.torch's saved-tensor hooks).
        if params.get("check", True):
            marked = int(incl[-1]) if ntiles else 0
            if marked != words.size:
                raise ValueError(f"zvc: bitmap marks {marked} nonzeros but {words.size} values were stored")
        offsets = incl - counts
        out = cp.empty(n, dtype=cp.uint32)
        gpu.launch(self.kernel_file, "zvc_decode_scatter", _zvc_threads(ntiles),
                   (bitmap, words, offsets, gpu.i64(n), out, gpu.i64(ntiles)))
        return out.view(cp.float32).reshape(shape)


# -- narrow-index CSR -------------------------------------------------------------------------------------
@register
class NarrowCSR(Codec):
    """Payload: values float32[nnz] (flattened C order), cols uint8[nnz] (index within a 256-element row),
    row_ptr int32[ceil(n/256)+1] (row_ptr[0] = 0; the last row may be short), shape int64[ndim].

    The row length is fixed at 256 rather than taken from the tensor's last dim: 256 is the widest row
    whose column index fits in a byte (Gist's narrow index), it needs no parameter, and row_ptr then costs
    4 bytes per KiB of dense data. row_ptr is int32 rather than the data-dependent narrowest width because
    payload dtypes are fixed when the graph is rewritten; that caps nnz at 2**31-1.
    """

    name = "csr"
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("values", "cols", "row_ptr", "shape")
    payload_dtypes = ("float32", "uint8", "int32", "int64")
    kernel_file = "csr.cu"

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        n = _numel(tuple(shape))
        return 5 * _nnz_from_stats(n, stats) + 4 * (_ntiles(n) + 1) + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        return _sample_inputs(rng)

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        words = _cpu_words(x)
        if (k := cpu.kernels("sparse")) is not None:
            values, cols, row_ptr = k.csr_encode(words)
            return values.view(np.float32), cols, row_ptr, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        n = int(words.size)
        nrows = _ntiles(n)
        mask = words != 0
        idx = np.flatnonzero(mask)
        if idx.size > _INT32_MAX:
            raise ValueError("csr: row_ptr is int32, too many nonzeros")
        values = np.take(words, idx).view(np.float32)
        cols = idx.astype(np.uint8)  # wrapping cast = i % 256, the column within a 256-element row
        del idx
        # Row counts by popcount of the packed mask: a 256-element row is four uint64 words.
        packed = np.zeros(nrows * (CSR_ROW // 8), dtype=np.uint8)
        packed[: (n + 7) // 8] = np.packbits(mask, bitorder="little")
        counts = np.bitwise_count(packed.view(np.uint64)).reshape(nrows, CSR_ROW // 64).sum(axis=1)
        row_ptr = np.zeros(nrows + 1, dtype=np.int32)
        np.cumsum(counts, out=row_ptr[1:])
        return values, cols, row_ptr, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        words, cols, row_ptr, shape, n, nrows = _csr_payload(np, payload)
        if (k := cpu.kernels("sparse")) is not None:
            return k.csr_decode(words, cols, row_ptr, n).view(np.float32).reshape(shape)
        row_ptr = row_ptr.astype(np.int64)
        idx = np.repeat(np.arange(nrows, dtype=np.int64) * CSR_ROW, np.diff(row_ptr))
        idx += cols
        out = np.zeros(n, dtype=np.uint32)
        out[idx] = words
        return out.view(np.float32).reshape(shape)

    # -- CuPy: per-row popcounts -> cupy.cumsum into row_ptr -> ballot-based scatter --------------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        words = _gpu_words(x)
        n = int(words.size)
        nrows = _ntiles(n)
        counts = cp.empty(nrows, dtype=cp.int32)
        gpu.launch(self.kernel_file, "csr_encode_count", nrows * _TILE,
                   (words, gpu.i64(n), counts, gpu.i64(nrows)))
        # Scan in int64, then narrow after a check, so an overflow is reported rather than wrapped.
        incl = cp.cumsum(counts, dtype=cp.int64)
        nnz = int(incl[-1]) if nrows else 0  # the one device->host sync: sizes values/cols
        if nnz > _INT32_MAX:
            raise ValueError("csr: row_ptr is int32, too many nonzeros")
        row_ptr = cp.zeros(nrows + 1, dtype=cp.int32)
        row_ptr[1:] = incl.astype(cp.int32)
        values = cp.empty(nnz, dtype=cp.uint32)
        cols = cp.empty(nnz, dtype=cp.uint8)
        if nnz:
            gpu.launch(self.kernel_file, "csr_encode_scatter", nrows * _TILE,
                       (words, gpu.i64(n), row_ptr, values, cols, gpu.i64(nrows)))
        return values.view(cp.float32), cols, row_ptr, gpu.shape_array(tuple(x.shape))

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        words, cols, row_ptr, shape, n, nrows = _csr_payload(cp, payload)
        out = cp.empty(n, dtype=cp.uint32)
        gpu.launch(self.kernel_file, "csr_decode", nrows * _TILE,
                   (words, cols, row_ptr, gpu.i64(n), out, gpu.i64(nrows)))
        return out.view(cp.float32).reshape(shape)
