"""Compiled kernels for the DPR codecs (formats, rounding and layouts in ``custom_ops/dpr.py``).

Per element the arithmetic of ``kernels/dpr.cu``'s ``dpr_encode_code``: NaN/Inf, the normal range by integer
round-to-nearest-even at the format's mantissa width (saturating), the subnormal range by the float32
magic-number addition of the NumPy backend. Decoding gathers from the format's value
table (bf16: a shift), moving float32 bits as uint32 so NaN payloads are never touched by float hardware.
"""
from __future__ import annotations

import numpy as np
from ._jit import njit, prange  # numba's, or AOT-bound stand-ins (cpu/aot.py)

__all__ = ["encode", "decode"]

# Signatures of the ahead-of-time compiled copies (cpu/aot.py; the types encode / decode pass).
AOT_SIGNATURES = {
    "_encode_fp16": "void(u4[::1], f4[::1], u2[::1], f4, f4)",
    "_encode_bf16": "void(u4[::1], f4[::1], u2[::1], f4, f4)",
    "_encode_fp8": "void(u4[::1], f4[::1], u1[::1], f4, f4)",
    "_encode_fp10": "void(u4[::1], f4[::1], u4[::1], f4, f4)",
    "_decode_table": ("void(u2[::1], u4[::1], u4[::1], i8)", "void(u1[::1], u4[::1], u4[::1], i8)"),  # 16 / 8 bits
    "_decode_bf16": "void(u2[::1], u4[::1])",
    "_decode_fp10": "void(u4[::1], u4[::1], u4[::1])",
}

CHUNK = 3 << 14  # elements per parallel task (a multiple of 3: fp10 tasks map to whole words)


_u32 = np.uint32


@njit(inline="always", cache=True)
def _code(u, xf, ebits, mbits, magic, inv_step):  # noqa: ANN001, ANN202
    """Format code (uint32) of float32 ``xf`` whose bits are ``u`` (uint32): every path computed, then selected
    (branch-free, so the loop vectorises). All integer arithmetic is uint32, wrapping like the NumPy backend's:
    8 lanes per AVX2 vector instead of 4, and a native unsigned min. numba types an operation on two uint32
    values as uint64 (it widens small integers), so every intermediate is cast back with ``_u32(...)``: LLVM
    then narrows each zero-extended operation to 32 bits (without the casts the loop ran in 64-bit lanes,
    measured 1.8x slower for fp10). A wrapped normal-range code only occurs below min_normal or for Inf / NaN,
    whose lanes take the subnormal / special code instead. Subnormal range: (|x| + C) - C in float32 is |x|
    rounded (RNE) to the format's subnormal step (see FloatFormat._sub_magic), exact; times 1/step it is the
    code."""
    one = _u32(1)
    bias = _u32(_u32(one << _u32(ebits - one)) - one)
    shift = _u32(_u32(23) - mbits)
    inf_code = _u32(_u32(_u32(one << ebits) - one) << mbits)
    round_add = _u32(_u32(_u32(one << _u32(shift - one)) - one) - _u32(_u32(_u32(127) - bias) << _u32(23)))
    a = _u32(u & _u32(0x7FFFFFFF))
    sign = _u32(_u32(u >> _u32(_u32(31) - ebits - mbits)) & _u32(one << _u32(ebits + mbits)))
    rounded = _u32(_u32(_u32(a + _u32(_u32(a >> shift) & one)) + round_add) >> shift)
    cap = _u32(inf_code - one)
    t_norm = rounded if rounded < cap else cap
    ax = np.abs(xf)
    t_sub = _u32(np.int32((np.float32(ax + magic) - magic) * inv_step))
    t_spec = inf_code if a == _u32(0x7F800000) else _u32(inf_code | _u32(one << _u32(mbits - one)))
    t = t_norm if (bias == _u32(127) or a >= _u32(_u32(_u32(128) - bias) << _u32(23))) else t_sub
    t = t_spec if a >= _u32(0x7F800000) else t
    return _u32(sign | t)


# Every kernel loops over slices of its task (indices 0..size-1): with a loop starting at a computed
# offset, numba's negative-index wraparound check stays in the loop and LLVM does not vectorise it (measured:
# the bf16 decode ran 4.7x slower that way).
#
# One encoder per format, with its widths as constants: LLVM folds every derived constant and drops the
# subnormal path of bf16 (which shares float32's exponent range).
@njit(parallel=True, cache=True, nogil=True)
def _encode_fp16(u, x, out, magic, inv_step):  # noqa: ANN001, ANN202
    n = u.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        uu, xx, oo = u[c * CHUNK:c * CHUNK + CHUNK], x[c * CHUNK:c * CHUNK + CHUNK], out[c * CHUNK:c * CHUNK + CHUNK]
        for i in range(oo.size):
            oo[i] = _code(uu[i], xx[i], np.uint32(5), np.uint32(10), magic, inv_step)


@njit(parallel=True, cache=True, nogil=True)
def _encode_bf16(u, x, out, magic, inv_step):  # noqa: ANN001, ANN202
    n = u.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        uu, xx, oo = u[c * CHUNK:c * CHUNK + CHUNK], x[c * CHUNK:c * CHUNK + CHUNK], out[c * CHUNK:c * CHUNK + CHUNK]
        for i in range(oo.size):
            oo[i] = _code(uu[i], xx[i], np.uint32(8), np.uint32(7), magic, inv_step)


@njit(parallel=True, cache=True, nogil=True)
def _encode_fp8(u, x, out, magic, inv_step):  # noqa: ANN001, ANN202
    n = u.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        uu, xx, oo = u[c * CHUNK:c * CHUNK + CHUNK], x[c * CHUNK:c * CHUNK + CHUNK], out[c * CHUNK:c * CHUNK + CHUNK]
        for i in range(oo.size):
            oo[i] = _code(uu[i], xx[i], np.uint32(4), np.uint32(3), magic, inv_step)


_ENCODERS = {"fp16": _encode_fp16, "bf16": _encode_bf16, "fp8": _encode_fp8}


@njit(parallel=True, cache=True, nogil=True)
def _encode_fp10(u, x, words, magic, inv_step):  # noqa: ANN001, ANN202
    """Codes of a task's elements into a task-local buffer (a vectorised loop), then three per word."""
    n = u.size
    nwords = words.size
    per = CHUNK // 3
    for c in prange((nwords + per - 1) // per):
        uu, xx = u[c * CHUNK:c * CHUNK + CHUNK], x[c * CHUNK:c * CHUNK + CHUNK]
        ww = words[c * per:c * per + per]
        codes = np.empty(CHUNK + 2, dtype=np.uint32)
        for i in range(uu.size):
            codes[i] = _code(uu[i], xx[i], np.uint32(5), np.uint32(4), magic, inv_step)
        codes[uu.size] = 0  # the last word's unused fields are 0
        codes[uu.size + 1] = 0
        for w in range(ww.size):
            ww[w] = codes[3 * w] | (codes[3 * w + 1] << np.uint32(10)) | (codes[3 * w + 2] << np.uint32(20))


@njit(parallel=True, cache=True, nogil=True)
def _decode_table(codes, table, out, mask):  # noqa: ANN001, ANN202
    n = out.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        cc, oo = codes[c * CHUNK:c * CHUNK + CHUNK], out[c * CHUNK:c * CHUNK + CHUNK]
        for i in range(oo.size):
            oo[i] = table[np.int64(cc[i]) & mask]


@njit(parallel=True, cache=True, nogil=True)
def _decode_bf16(codes, out):  # noqa: ANN001, ANN202
    n = out.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        cc, oo = codes[c * CHUNK:c * CHUNK + CHUNK], out[c * CHUNK:c * CHUNK + CHUNK]
        for i in range(oo.size):
            oo[i] = np.uint32(cc[i]) << np.uint32(16)


@njit(parallel=True, cache=True, nogil=True)
def _decode_fp10(words, table, out):  # noqa: ANN001, ANN202
    n = out.size
    nwords = words.size
    per = CHUNK // 3
    for c in prange((nwords + per - 1) // per):
        ww, oo = words[c * per:c * per + per], out[c * CHUNK:c * CHUNK + CHUNK]
        full = min(ww.size, oo.size // 3)
        for w in range(full):
            v = np.int64(ww[w])
            oo[3 * w] = table[v & 0x3FF]
            oo[3 * w + 1] = table[(v >> 10) & 0x3FF]
            oo[3 * w + 2] = table[(v >> 20) & 0x3FF]
        if full < ww.size:  # the last word, holding 1 or 2 codes
            v = np.int64(ww[full])
            for k in range(oo.size - 3 * full):
                oo[3 * full + k] = table[(v >> (10 * k)) & 0x3FF]


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
    _ENCODERS[f.name](u, u.view(np.float32), out, *_sub_consts(f))
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
