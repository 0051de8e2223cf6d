"""Compiled kernels for the lossless sparse codecs ``zvc`` and ``csr`` (layouts in ``custom_ops/sparse.py``).

Elements move as uint32 words (NaN payloads and -0.0 survive). Encoders run two parallel passes: count
nonzeros per chunk (ZVC also writes its bitmap), then, after a prefix sum over the chunks, copy each chunk's
nonzeros to its offset. ZVC chunks are ``CHUNK`` elements; CSR chunks are whole 256-element rows.
"""
from __future__ import annotations

import numpy as np

from ._jit import njit, prange  # numba's, or AOT-bound stand-ins (cpu/aot.py)

__all__ = ["zvc_count", "zvc_finish", "zvc_encode", "zvc_decode", "csr_encode", "csr_decode"]

# Signatures of the ahead-of-time compiled copies (cpu/aot.py; the types the wrappers below pass).
AOT_SIGNATURES = {
    "_zvc_count": "void(u4[::1], u1[::1], i8[::1])",
    "_compact": "void(u4[::1], i8[::1], u4[::1], i8)",
    "_zvc_decode": "void(u1[::1], u4[::1], i8[::1], u4[::1])",
    "_zvc_decode_counts": "void(u1[::1], i8, i8[::1])",
    "_csr_row_counts": "void(u4[::1], i8[::1])",
    "_csr_scatter": "void(u4[::1], i4[::1], u4[::1], u1[::1])",
    "_csr_decode": "void(u4[::1], u1[::1], i4[::1], u4[::1])",
}

CHUNK = 1 << 16   # elements per ZVC task (a multiple of 8 and of 256)
ROW = 256
ROWS_PER_TASK = CHUNK // ROW


# Loops run over per-task slices (indices from 0): a loop from a computed offset keeps numba's negative-index
# wraparound check and does not vectorise (custom_ops/cpu/dpr.py measured 1.4-4.7x).
# (q * _PACK) >> 56 packs the eight 0/1 bytes of the little-endian uint64 q into one byte, byte j -> bit j (no
# partial product reaches bits 56-63 except byte j's own; checked over all 256 patterns in the tests).
_PACK = np.uint64(0x0102040810204080)


@njit(parallel=True, cache=True, nogil=True)
def _zvc_count(words, bitmap, counts):  # noqa: ANN001, ANN202
    """Bitmap and per-chunk nonzero counts. The nonzero flags go to a task-local byte array first (a
    vectorised loop, as is the count over it); each bitmap byte is then one multiply of eight flags. The
    previous per-bit OR loop over the words ran ~1.5x slower."""
    for c in prange(counts.size):
        w = words[c * CHUNK:(c + 1) * CHUNK]
        bm = bitmap[c * (CHUNK // 8):(c + 1) * (CHUNK // 8)]
        nz = np.zeros(CHUNK, dtype=np.uint8)  # 0/1 per element, 0 past the end (the last byte's padding bits)
        for i in range(w.size):
            nz[i] = w[i] != 0
        cnt = 0
        for i in range(w.size):
            cnt += nz[i]
        q = nz.view(np.uint64)
        for b in range(bm.size):
            bm[b] = np.uint8((q[b] * _PACK) >> np.uint64(56))
        counts[c] = cnt


@njit(parallel=True, cache=True, nogil=True)
def _compact(words, starts, values, chunk):  # noqa: ANN001, ANN202
    """values[starts[c]:starts[c+1]] = nonzero words of chunk c (``chunk`` elements per task)."""
    for c in prange(starts.size - 1):
        w = words[c * chunk:(c + 1) * chunk]
        v = values[starts[c]:starts[c + 1]]
        pos = 0
        end = v.size
        for i in range(w.size):
            if pos >= end:  # the chunk's nonzeros are all written: its tail is zeros
                break
            x = w[i]
            v[pos] = x  # branchless: overwritten by the next nonzero unless x != 0
            pos += x != 0


@njit(parallel=True, cache=True, nogil=True)
def _zvc_decode(bitmap, values, starts, out):  # noqa: ANN001, ANN202
    for c in prange(starts.size - 1):
        o = out[c * CHUNK:(c + 1) * CHUNK]
        bm = bitmap[c * (CHUNK // 8):(c + 1) * (CHUNK // 8)]
        v = values[starts[c]:starts[c + 1]]
        if v.size == 0:
            for i in range(o.size):
                o[i] = 0
            continue
        last = v.size - 1
        pos = 0
        for i in range(o.size):
            bit = (bm[i >> 3] >> (i & 7)) & 1
            o[i] = v[min(pos, last)] * np.uint32(bit)
            pos += bit


@njit(parallel=True, cache=True, nogil=True)
def _zvc_decode_counts(bitmap, n, counts):  # noqa: ANN001, ANN202
    nbytes = bitmap.size
    for c in prange(counts.size):
        b0 = c * (CHUNK // 8)
        b1 = min(nbytes, b0 + CHUNK // 8)
        cnt = 0
        for b in range(b0, b1):
            v = np.int64(bitmap[b])
            if b == nbytes - 1 and n % 8:
                v &= (1 << (n % 8)) - 1  # padding bits past n do not count
            v = v - ((v >> 1) & 0x55)
            v = (v & 0x33) + ((v >> 2) & 0x33)
            cnt += (v + (v >> 4)) & 0x0F
        counts[c] = cnt


@njit(parallel=True, cache=True, nogil=True)
def _csr_row_counts(words, counts):  # noqa: ANN001, ANN202
    nrows = counts.size
    for t in prange((nrows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        w = words[t * CHUNK:(t + 1) * CHUNK]
        cn = counts[t * ROWS_PER_TASK:(t + 1) * ROWS_PER_TASK]
        for r in range(cn.size):
            row = w[r * ROW:(r + 1) * ROW]
            cnt = 0
            for i in range(row.size):
                cnt += row[i] != 0
            cn[r] = cnt


@njit(parallel=True, cache=True, nogil=True)
def _csr_scatter(words, row_ptr, values, cols):  # noqa: ANN001, ANN202
    nrows = row_ptr.size - 1
    for t in prange((nrows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        for r in range(t * ROWS_PER_TASK, min(nrows, (t + 1) * ROWS_PER_TASK)):
            row = words[r * ROW:(r + 1) * ROW]
            v = values[row_ptr[r]:row_ptr[r + 1]]
            cl = cols[row_ptr[r]:row_ptr[r + 1]]
            pos = 0
            for i in range(row.size):
                if pos >= v.size:
                    break
                x = row[i]
                v[pos] = x
                cl[pos] = i
                pos += x != 0


@njit(parallel=True, cache=True, nogil=True)
def _csr_decode(values, cols, row_ptr, out):  # noqa: ANN001, ANN202
    nrows = row_ptr.size - 1
    for t in prange((nrows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        for r in range(t * ROWS_PER_TASK, min(nrows, (t + 1) * ROWS_PER_TASK)):
            row = out[r * ROW:(r + 1) * ROW]
            for i in range(row.size):
                row[i] = 0
            v = values[row_ptr[r]:row_ptr[r + 1]]
            cl = cols[row_ptr[r]:row_ptr[r + 1]]
            for p in range(v.size):
                row[cl[p]] = v[p]


def _starts(counts: np.ndarray) -> np.ndarray:
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts


def zvc_count(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encode pass 1: (bitmap uint8, chunk starts int64; starts[-1] is the nonzero count) of flat uint32 words.
    ``sparse`` picks its mode from that count, so choosing ZVC costs no separate counting pass."""
    n = words.size
    bitmap = np.empty((n + 7) // 8, dtype=np.uint8)
    counts = np.empty(-(-n // CHUNK), dtype=np.int64)
    _zvc_count(words, bitmap, counts)
    return bitmap, _starts(counts)


def zvc_finish(words: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Encode pass 2 after ``zvc_count``: the nonzero values (uint32)."""
    values = np.empty(int(starts[-1]), dtype=np.uint32)
    _compact(words, starts, values, CHUNK)
    return values


def zvc_encode(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bitmap uint8, values uint32) of flat uint32 words."""
    bitmap, starts = zvc_count(words)
    return bitmap, zvc_finish(words, starts)


def zvc_decode(bitmap: np.ndarray, words: np.ndarray, n: int) -> np.ndarray:
    """Flat uint32[n]; ValueError if the bitmap marks a different number of nonzeros than were stored."""
    counts = np.empty(-(-n // CHUNK), dtype=np.int64)
    _zvc_decode_counts(bitmap, n, counts)
    starts = _starts(counts)
    if int(starts[-1]) != words.size:
        raise ValueError(f"zvc: bitmap marks {int(starts[-1])} nonzeros but {words.size} values were stored")
    out = np.empty(n, dtype=np.uint32)
    _zvc_decode(bitmap, words, starts, out)
    return out


def csr_encode(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values uint32, cols uint8, row_ptr int32) of flat uint32 words."""
    n = words.size
    nrows = -(-n // ROW)
    counts = np.empty(nrows, dtype=np.int64)
    _csr_row_counts(words, counts)
    starts = _starts(counts)
    nnz = int(starts[-1])
    if nnz > np.iinfo(np.int32).max:
        raise ValueError("csr: row_ptr is int32, too many nonzeros")
    row_ptr = starts.astype(np.int32)
    values = np.empty(nnz, dtype=np.uint32)
    cols = np.empty(nnz, dtype=np.uint8)
    _csr_scatter(words, row_ptr, values, cols)
    return values, cols, row_ptr


def csr_decode(words: np.ndarray, cols: np.ndarray, row_ptr: np.ndarray, n: int) -> np.ndarray:
    """Flat uint32[n] from a payload ``sparse._csr_payload`` has already validated."""
    out = np.empty(n, dtype=np.uint32)
    _csr_decode(words, cols, row_ptr, out)
    return out
