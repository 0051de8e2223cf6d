"""Compiled kernels for the lossless sparse codecs ``zvc`` and ``csr`` (layouts in ``custom_ops/sparse.py``).

Elements move as uint32 words (NaN payloads and -0.0 survive). Encoders run two parallel passes: count
nonzeros per chunk (ZVC also writes its bitmap), then, after a prefix sum over the chunks, copy each chunk's
nonzeros to its offset. ZVC chunks are ``CHUNK`` elements; CSR chunks are whole 256-element rows.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["zvc_encode", "zvc_decode", "csr_encode", "csr_decode"]

CHUNK = 1 << 16   # elements per ZVC task (a multiple of 8 and of 256)
ROW = 256
ROWS_PER_TASK = CHUNK // ROW


@njit(parallel=True, cache=True, nogil=True)
def _zvc_count(words, bitmap, counts):  # noqa: ANN001, ANN202
    n = words.size
    for c in prange(counts.size):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        cnt = 0
        for b in range(i0 // 8, (i1 + 7) // 8):
            v = 0
            for j in range(min(8, i1 - b * 8)):
                v |= np.int64(words[b * 8 + j] != 0) << j
            bitmap[b] = v
            cnt += v & 1
            cnt += (v >> 1) & 1
            cnt += (v >> 2) & 1
            cnt += (v >> 3) & 1
            cnt += (v >> 4) & 1
            cnt += (v >> 5) & 1
            cnt += (v >> 6) & 1
            cnt += (v >> 7) & 1
        counts[c] = cnt


@njit(parallel=True, cache=True, nogil=True)
def _compact(words, starts, values, chunk):  # noqa: ANN001, ANN202
    """values[starts[c]:starts[c+1]] = nonzero words of chunk c (``chunk`` elements per task)."""
    n = words.size
    for c in prange(starts.size - 1):
        i0 = c * chunk
        i1 = min(n, i0 + chunk)
        pos = starts[c]
        end = starts[c + 1]
        for i in range(i0, i1):
            if pos >= end:  # the chunk's nonzeros are all written: its tail is zeros
                break
            w = words[i]
            values[pos] = w  # branchless: overwritten by the next nonzero unless w != 0
            pos += w != 0


@njit(parallel=True, cache=True, nogil=True)
def _zvc_decode(bitmap, values, starts, out):  # noqa: ANN001, ANN202
    n = out.size
    nnz = values.size
    last = max(nnz - 1, 0)
    for c in prange(starts.size - 1):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        pos = starts[c]
        if nnz == 0:
            for i in range(i0, i1):
                out[i] = 0
            continue
        for i in range(i0, i1):
            bit = (bitmap[i >> 3] >> (i & 7)) & 1
            out[i] = values[min(pos, last)] * np.uint32(bit)
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
    n = words.size
    nrows = counts.size
    for t in prange((nrows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        for r in range(t * ROWS_PER_TASK, min(nrows, (t + 1) * ROWS_PER_TASK)):
            cnt = 0
            for i in range(r * ROW, min(n, r * ROW + ROW)):
                cnt += words[i] != 0
            counts[r] = cnt


@njit(parallel=True, cache=True, nogil=True)
def _csr_scatter(words, row_ptr, values, cols):  # noqa: ANN001, ANN202
    n = words.size
    nrows = row_ptr.size - 1
    for t in prange((nrows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        for r in range(t * ROWS_PER_TASK, min(nrows, (t + 1) * ROWS_PER_TASK)):
            pos = np.int64(row_ptr[r])
            end = np.int64(row_ptr[r + 1])
            i0 = r * ROW
            for i in range(i0, min(n, i0 + ROW)):
                if pos >= end:
                    break
                w = words[i]
                values[pos] = w
                cols[pos] = i - i0
                pos += w != 0


@njit(parallel=True, cache=True, nogil=True)
def _csr_decode(values, cols, row_ptr, out):  # noqa: ANN001, ANN202
    n = out.size
    nrows = row_ptr.size - 1
    for t in prange((nrows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        for r in range(t * ROWS_PER_TASK, min(nrows, (t + 1) * ROWS_PER_TASK)):
            i0 = r * ROW
            for i in range(i0, min(n, i0 + ROW)):
                out[i] = 0
            for p in range(row_ptr[r], row_ptr[r + 1]):
                out[i0 + cols[p]] = values[p]


def _starts(counts: np.ndarray) -> np.ndarray:
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts


def zvc_encode(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bitmap uint8, values uint32) of flat uint32 words."""
    n = words.size
    bitmap = np.empty((n + 7) // 8, dtype=np.uint8)
    counts = np.empty(-(-n // CHUNK), dtype=np.int64)
    _zvc_count(words, bitmap, counts)
    starts = _starts(counts)
    values = np.empty(int(starts[-1]), dtype=np.uint32)
    _compact(words, starts, values, CHUNK)
    return bitmap, values


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
