"""Compiled kernels for the DPR codecs (formats, rounding and layouts in ``custom_ops/dpr.py``).

Per element the arithmetic of ``kernels/dpr.cu``'s ``dpr_encode_code``: NaN/Inf first, the normal range by
integer round-to-nearest-even at the format's mantissa width (saturating), the subnormal range as
``rint(|x| * 2**(bias + mbits - 1))`` -- an exact power-of-two scaling followed by RNE to the subnormal step,
which is what the NumPy backend's magic-number addition computes. Decoding gathers from the format's value
table (bf16: a shift), moving float32 bits as uint32 so NaN payloads are never touched by float hardware.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["encode", "decode"]

CHUNK = 3 << 14  # elements per parallel task (a multiple of 3: fp10 tasks map to whole words)


@njit(inline="always", cache=True)
def _code(u, xf, ebits, mbits, sub_scale):  # noqa: ANN001, ANN202
    """Format code of float32 ``xf`` whose bits are ``u`` (int64 arithmetic; see the module docstring)."""
    bias = (1 << (ebits - 1)) - 1
    shift = 23 - mbits
    inf_code = ((1 << ebits) - 1) << mbits
    a = u & 0x7FFFFFFF
    sign = (u >> (31 - ebits - mbits)) & (1 << (ebits + mbits))
    if a >= 0x7F800000:
        t = inf_code if a == 0x7F800000 else inf_code | (1 << (mbits - 1))
    elif bias == 127 or a >= ((128 - bias) << 23):
        t = (a + ((a >> shift) & 1) + (1 << (shift - 1)) - 1 - ((127 - bias) << 23)) >> shift
        t = min(t, inf_code - 1)
    else:
        t = np.int64(np.rint(np.abs(np.float64(xf)) * sub_scale))
    return sign | t


@njit(parallel=True, cache=True, nogil=True)
def _encode(u, x, out, ebits, mbits, sub_scale):  # noqa: ANN001, ANN202
    n = u.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        for i in range(c * CHUNK, min(n, c * CHUNK + CHUNK)):
            out[i] = _code(np.int64(u[i]), x[i], ebits, mbits, sub_scale)


@njit(parallel=True, cache=True, nogil=True)
def _encode_fp10(u, x, words, sub_scale):  # noqa: ANN001, ANN202
    n = u.size
    nwords = words.size
    per = CHUNK // 3
    for c in prange((nwords + per - 1) // per):
        for w in range(c * per, min(nwords, c * per + per)):
            i = 3 * w
            v = _code(np.int64(u[i]), x[i], 5, 4, sub_scale)
            if i + 1 < n:
                v |= _code(np.int64(u[i + 1]), x[i + 1], 5, 4, sub_scale) << 10
            if i + 2 < n:
                v |= _code(np.int64(u[i + 2]), x[i + 2], 5, 4, sub_scale) << 20
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


def _sub_scale(f) -> float:  # noqa: ANN001  (a dpr.FloatFormat)
    return float(2.0 ** (f.bias + f.mbits - 1))


def encode(u: np.ndarray, f) -> np.ndarray:  # noqa: ANN001
    """Codes (uint8 / uint16) of flat float32 bits ``u``; fp10: packed uint32 words."""
    if f.name == "fp10":
        words = np.empty(-(-u.size // 3), dtype=np.uint32)
        _encode_fp10(u, u.view(np.float32), words, _sub_scale(f))
        return words
    out = np.empty(u.size, dtype=np.uint8 if f.bits <= 8 else np.uint16)
    _encode(u, u.view(np.float32), out, np.int64(f.ebits), np.int64(f.mbits), _sub_scale(f))
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
