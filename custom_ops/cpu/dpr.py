"""Compiled kernels for the DPR codecs (formats, rounding and layouts in ``custom_ops/dpr.py``).

Per element the arithmetic of ``kernels/dpr.cu``'s ``dpr_encode_code``: NaN/Inf, the normal range by integer
round-to-nearest-even at the format's mantissa width (saturating), the subnormal range by the float32
magic-number addition of the NumPy backend. Decoding gathers from the format's value
table (bf16: a shift), moving float32 bits as uint32 so NaN payloads are never touched by float hardware.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["encode", "decode"]

CHUNK = 3 << 14  # elements per parallel task (a multiple of 3: fp10 tasks map to whole words)


@njit(inline="always", cache=True)
def _code(u, xf, ebits, mbits, magic, inv_step):  # noqa: ANN001, ANN202
    """Format code of float32 ``xf`` whose bits are ``u``: every path computed, then selected (branch-free,
    so the loop vectorises). Subnormal range: (|x| + C) - C in float32 is |x| rounded (RNE) to the
    format's subnormal step (see FloatFormat._sub_magic), exact; times 1/step it is the code."""
    bias = (1 << (ebits - 1)) - 1
    shift = 23 - mbits
    inf_code = ((1 << ebits) - 1) << mbits
    a = u & 0x7FFFFFFF
    sign = (u >> (31 - ebits - mbits)) & (1 << (ebits + mbits))
    t_norm = min((a + ((a >> shift) & 1) + (1 << (shift - 1)) - 1 - ((127 - bias) << 23)) >> shift, inf_code - 1)
    ax = np.abs(xf)
    t_sub = np.int64(np.int32((np.float32(ax + magic) - magic) * inv_step))
    t_spec = inf_code if a == 0x7F800000 else inf_code | (1 << (mbits - 1))
    t = t_norm if (bias == 127 or a >= ((128 - bias) << 23)) else t_sub
    t = t_spec if a >= 0x7F800000 else t
    return sign | t


@njit(parallel=True, cache=True, nogil=True)
def _encode(u, x, out, ebits, mbits, magic, inv_step):  # noqa: ANN001, ANN202
    n = u.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        for i in range(c * CHUNK, min(n, c * CHUNK + CHUNK)):
            out[i] = _code(np.int64(u[i]), x[i], ebits, mbits, magic, inv_step)


@njit(parallel=True, cache=True, nogil=True)
def _encode_fp10(u, x, words, magic, inv_step):  # noqa: ANN001, ANN202
    n = u.size
    nwords = words.size
    per = CHUNK // 3
    for c in prange((nwords + per - 1) // per):
        for w in range(c * per, min(nwords, c * per + per)):
            i = 3 * w
            v = _code(np.int64(u[i]), x[i], 5, 4, magic, inv_step)
            if i + 1 < n:
                v |= _code(np.int64(u[i + 1]), x[i + 1], 5, 4, magic, inv_step) << 10
            if i + 2 < n:
                v |= _code(np.int64(u[i + 2]), x[i + 2], 5, 4, magic, inv_step) << 20
            words[w] = v


@njit(parallel=True, cache=True, nogil=True)
def _decode_table(codes, table, out, mask):  # noqa: ANN001, ANN202
    n = out.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        for i in range(c * CHUNK, min(n, c * CHUNK + CHUNK)):
            out[i] = table[np.int64(codes[i]) & mask]


@njit(parallel=True, cache=True, nogil=True)
def _decode_bf16(codes, out):  # noqa: ANN001, ANN202
    n = out.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        for i in range(c * CHUNK, min(n, c * CHUNK + CHUNK)):
            out[i] = np.uint32(codes[i]) << np.uint32(16)


@njit(parallel=True, cache=True, nogil=True)
def _decode_fp10(words, table, out):  # noqa: ANN001, ANN202
    n = out.size
    nwords = words.size
    per = CHUNK // 3
    for c in prange((nwords + per - 1) // per):
        for w in range(c * per, min(nwords, c * per + per)):
            v = np.int64(words[w])
            i = 3 * w
            out[i] = table[v & 0x3FF]
            if i + 1 < n:
                out[i + 1] = table[(v >> 10) & 0x3FF]
            if i + 2 < n:
                out[i + 2] = table[(v >> 20) & 0x3FF]


def _sub_consts(f) -> tuple[np.float32, np.float32]:  # noqa: ANN001  (a dpr.FloatFormat)
    """(C, 1/step) in float32 for the subnormal path (bf16: unused, any finite values)."""
    if f.bias == 127:
        return np.float32(1.0), np.float32(1.0)
    return np.float32(f._sub_magic), np.float32(1.0 / f.min_subnormal)


def encode(u: np.ndarray, f) -> np.ndarray:  # noqa: ANN001
    """Codes (uint8 / uint16) of flat float32 bits ``u``; fp10: packed uint32 words."""
    if f.name == "fp10":
        words = np.empty(-(-u.size // 3), dtype=np.uint32)
        _encode_fp10(u, u.view(np.float32), words, *_sub_consts(f))
        return words
    out = np.empty(u.size, dtype=np.uint8 if f.bits <= 8 else np.uint16)
    _encode(u, u.view(np.float32), out, np.int64(f.ebits), np.int64(f.mbits), *_sub_consts(f))
    return out


def decode(packed: np.ndarray, f, n: int) -> np.ndarray:  # noqa: ANN001
    """Flat float32[n] from a validated payload."""
    out = np.empty(n, dtype=np.uint32)
    if f.name == "bf16":
        _decode_bf16(packed, out)
    elif f.name == "fp10":
        _decode_fp10(packed, f.table.view(np.uint32), out)
    else:
        _decode_table(packed, f.table.view(np.uint32), out, np.int64((1 << f.bits) - 1))
    return out.view(np.float32)
