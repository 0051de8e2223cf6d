"""Compiled CPU backend of the ``zfp`` codec: writes the same words as ``kernels/zfp.cu`` and the NumPy coder
(``custom_ops/zfp.py`` has the format), but codes each bit plane a run at a time instead of a bit at a time.

ZFP's group test emits, per plane, the ``n`` verbatim bits of the coefficients already significant, then runs of
"1, zeros up to and including the next set bit" (or a lone 0 when nothing is left). Each of those is one
shifted OR into the stream here (the position of the next set bit is a count-trailing-zeros instruction), and
the decoder reads the same runs through a 64-bit window. Fixed rate makes every block's bits start at
``b · budget``, so blocks are coded in parallel; a task of GROUP blocks starts on a word boundary, so no two
tasks touch one word. Imported only when numba is installed; ``custom_ops/zfp.py`` falls back to its
vectorised NumPy coder otherwise.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

_PERM2 = np.array([0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15], dtype=np.int64)
_NB = np.int64(0xAAAAAAAA)
_F32_MAX = float(np.finfo(np.float32).max)
GROUP = 256  # blocks per parallel task: a multiple of 8, so a task's first bit (b * rate * 4 or 16) is word-aligned
# 2**e for the block scale factors, e in [-_POW_OFF, _POW_OFF]: the scaling x * 2**(precision - emax) is exact in
# float64 (a float32 times a power of two inside float64's normal range), so it equals ldexp without a libm call.
_POW_OFF = 400
_POW2 = np.array([math.ldexp(1.0, e) for e in range(-_POW_OFF, _POW_OFF + 1)], dtype=np.float64)


@intrinsic
def _ctz(typingctx, x):  # noqa: ANN001, ANN202
    """Count trailing zeros (x != 0): one instruction (LLVM's cttz)."""
    sig = x(x)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@intrinsic
def _clz(typingctx, x):  # noqa: ANN001, ANN202
    """Count leading zeros (x != 0)."""
    sig = x(x)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


# Bit-plane transposition, 8 coefficients per uint64 (byte lane i = coefficient i): bit j of every lane gathered
# into one byte by a multiply, and a byte spread back into 8 lanes (the trick of custom_ops/cpu/sz.py).
_LSB = np.uint64(0x0101010101010101)
_GATHER = np.uint64(0x0102040810204080)
_SPREAD_MASK = np.uint64(0x8040201008040201)
_SPREAD_ADD = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)


@numba.njit(cache=True, inline="always")
def _lanes(u, size, sh):
    """Byte ``sh // 8`` of coefficients 0-7 and 8-15 as byte lanes of two uint64."""
    lo = np.uint64(0)
    hi = np.uint64(0)
    for i in range(min(size, 8)):
        lo |= ((np.uint64(u[i]) >> sh) & np.uint64(0xFF)) << np.uint64(8 * i)
    for i in range(8, size):
        hi |= ((np.uint64(u[i]) >> sh) & np.uint64(0xFF)) << np.uint64(8 * (i - 8))
    return lo, hi


@numba.njit(cache=True, inline="always")
def _gather(lo, hi, j):
    """Bit plane j of the lanes: bit i = bit j of coefficient i."""
    a = (((lo >> j) & _LSB) * _GATHER) >> np.uint64(56)
    b = (((hi >> j) & _LSB) * _GATHER) >> np.uint64(56)
    return np.int64(a | (b << np.uint64(8)))


@numba.njit(cache=True, inline="always")
def _spread(v):
    """The 8 bits of byte v as 8 byte lanes of 0 / 1 (lane l = bit l)."""
    return ((((v * _LSB) & _SPREAD_MASK) + _SPREAD_ADD) & _HIGH) >> np.uint64(7)


@numba.njit(cache=True, inline="always")
def _flush(u, size, lo, hi, sh):
    """OR byte lanes into bits sh..sh+7 of the coefficients."""
    for i in range(min(size, 8)):
        u[i] |= np.int64((lo >> np.uint64(8 * i)) & np.uint64(0xFF)) << sh
    for i in range(8, size):
        u[i] |= np.int64((hi >> np.uint64(8 * (i - 8))) & np.uint64(0xFF)) << sh


@numba.njit(cache=True, inline="always")
def _origin(b, n, h, w, two_d):
    """(flat index of block b's plane, its first row, its first column); 1-D: (first index, 0, 0)."""
    if not two_d:
        return b * 4, 0, 0
    bc = (w + 3) // 4
    br = (h + 3) // 4
    p = b // (br * bc)
    rem = b - p * br * bc
    by = rem // bc
    return p * h * w, by * 4, (rem - by * bc) * 4


@numba.njit(cache=True, inline="always")
def _next(base, r0, c0, h, w, two_d):
    """``_origin`` of the block after the one at (base, r0, c0): no integer division (two per block were a
    large part of the per-block cost)."""
    if not two_d:
        return base + 4, 0, 0
    c0 += 4
    if c0 >= w:
        c0 = 0
        r0 += 4
        if r0 >= h:
            r0 = 0
            base += h * w
    return base, r0, c0


@numba.njit(cache=True, inline="always")
def _at(base, r0, c0, k, n, h, w, two_d):
    """Flat index of value k of the block at ``_origin``, clamped into the tensor (padding repeats the last row /
    column / element)."""
    if not two_d:
        i = base + k
        return i if i < n else n - 1
    return base + min(r0 + (k >> 2), h - 1) * w + min(c0 + (k & 3), w - 1)


@numba.njit(cache=True, inline="always")
def _inside(base, r0, c0, k, n, h, w, two_d):
    """Whether value k of the block at ``_origin`` lies inside the tensor (not padding)."""
    if not two_d:
        return base + k < n
    return r0 + (k >> 2) < h and c0 + (k & 3) < w


@numba.njit(cache=True, inline="always")
def _fwd4(p, o, s):
    a0, a1, a2, a3 = p[o], p[o + s], p[o + 2 * s], p[o + 3 * s]
    d0 = a0 - a1
    s0 = (a1 + (d0 >> 1)) * 2
    d1 = a2 - a3
    s1 = (a3 + (d1 >> 1)) * 2
    dd = s0 - s1
    ss = (s1 + (dd >> 1)) * 2
    p[o], p[o + s], p[o + 2 * s], p[o + 3 * s] = ss, dd, d0, d1


@numba.njit(cache=True, inline="always")
def _inv4(p, o, s):
    ss, dd, d0, d1 = p[o], p[o + s], p[o + 2 * s], p[o + 3 * s]
    s1 = (ss >> 1) - (dd >> 1)
    s0 = dd + s1
    a1 = (s0 >> 1) - (d0 >> 1)
    a0 = d0 + a1
    a3 = (s1 >> 1) - (d1 >> 1)
    a2 = d1 + a3
    p[o], p[o + s], p[o + 2 * s], p[o + 3 * s] = a0, a1, a2, a3


@numba.njit(cache=True, inline="always")
def _put(data, bit, end, val, nbits):
    """OR the low ``nbits`` (<= 49) of val into the stream at ``bit``, cut at ``end``."""
    room = end - bit
    if room <= 0 or val == 0:
        return
    if nbits > room:
        val &= (np.uint64(1) << np.uint64(room)) - np.uint64(1)
        if val == 0:
            return
    off = np.uint64(bit & 31)
    w = bit >> 5
    data[w] |= np.uint32((val << off) & np.uint64(0xFFFFFFFF))
    rest = val >> (np.uint64(32) - off)  # bits that spill into the next words
    if rest != 0:
        data[w + 1] |= np.uint32(rest & np.uint64(0xFFFFFFFF))
        rest >>= np.uint64(32)
        if rest != 0:
            data[w + 2] |= np.uint32(rest)


@numba.njit(cache=True, inline="always")
def _peek(data, bit, nbits):
    """The ``nbits`` (<= 32) stream bits from ``bit`` as an integer (bits past the data read as 0)."""
    w = bit >> 5
    v = np.uint64(data[w])
    if w + 1 < data.size:
        v |= np.uint64(data[w + 1]) << np.uint64(32)
    v >>= np.uint64(bit & 31)
    return np.int64(v & ((np.uint64(1) << np.uint64(nbits)) - np.uint64(1)))


@numba.njit(cache=True, inline="always")
def _window(data, bit):
    """64 stream bits from ``bit`` (bits past the data read as 0)."""
    w = bit >> 5
    off = np.uint64(bit & 31)
    v = np.uint64(data[w])
    if w + 1 < data.size:
        v |= np.uint64(data[w + 1]) << np.uint64(32)
    v >>= off
    if off != 0 and w + 2 < data.size:
        v |= np.uint64(data[w + 2]) << (np.uint64(64) - off)
    return v


@numba.njit(parallel=True, cache=True, nogil=True)
def encode(x, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, data):
    """OR every block's bits into ``data`` (uint32, zeroed). x must be finite (the caller zeroes NaN/±Inf).
    Parallel over tasks of GROUP blocks: each task's bits start on a word boundary."""
    size = 16 if two_d else 4
    budget = rate * size
    xb = x.view(np.uint32)
    for t in numba.prange((nblocks + GROUP - 1) // GROUP):
        v = np.empty(16, np.float32)
        q = np.empty(16, np.int64)
        u = np.empty(16, np.int64)
        base, r0, c0 = _origin(t * GROUP, n, h, w, two_d)
        for b in range(t * GROUP, min(nblocks, (t + 1) * GROUP)):
            if b > t * GROUP:
                base, r0, c0 = _next(base, r0, c0, h, w, two_d)
            amaxb = np.uint32(0)
            if two_d and r0 + 4 <= h and c0 + 4 <= w:  # interior block: four rows of four, no clamping
                for r in range(4):
                    row = base + (r0 + r) * w + c0
                    for c in range(4):
                        v[4 * r + c] = x[row + c]
                        amaxb = max(amaxb, xb[row + c] & np.uint32(0x7FFFFFFF))
            else:
                for k in range(size):
                    i = _at(base, r0, c0, k, n, h, w, two_d)
                    v[k] = x[i]
                    amaxb = max(amaxb, xb[i] & np.uint32(0x7FFFFFFF))
            if amaxb == 0:
                continue  # all-zero block: exponent field 0, nothing else (data is zeroed)
            if amaxb >= np.uint32(0x800000):  # normal: frexp exponent from the bits
                emax = np.int64(amaxb >> np.uint32(23)) - 126
            else:  # subnormal m * 2**-149: frexp exponent = bit length of m - 149
                emax = 64 - np.int64(_clz(np.uint64(amaxb))) - 149
            bit = b * budget
            end = bit + budget
            _put(data, bit, end, np.uint64(emax + exp_bias), exp_bits)
            bit += exp_bits
            scale = _POW2[precision - emax + _POW_OFF]
            for k in range(size):
                q[k] = np.int64(np.float64(v[k]) * scale)  # truncates toward zero, as math.trunc
            ormask = np.int64(0)
            if two_d:
                for r in range(4):
                    _fwd4(q, 4 * r, 1)
                for c in range(4):
                    _fwd4(q, c, 4)
                for i in range(16):
                    u[i] = ((q[_PERM2[i]] + _NB) ^ _NB) & 0xFFFFFFFF
                    ormask |= u[i]
            else:
                _fwd4(q, 0, 1)
                for i in range(4):
                    u[i] = ((q[i] + _NB) ^ _NB) & 0xFFFFFFFF
                    ormask |= u[i]
            # planes above the highest set bit are empty: one 0 (group test) each, nothing else
            top = 63 - np.int64(_clz(np.uint64(ormask)))
            bit += 31 - top
            nsig = 0
            k = top
            group = -1
            lo = np.uint64(0)
            hi = np.uint64(0)
            while k >= 0 and bit < end:
                if k >> 3 != group:  # the next byte of every coefficient, as 8 byte lanes per uint64
                    group = k >> 3
                    lo, hi = _lanes(u, size, np.uint64(8 * group))
                xk = _gather(lo, hi, np.uint64(k & 7))
                # the plane's whole bit sequence in one register, then one OR into the stream: the verbatim
                # bits of the coefficients already significant, then the group tests and their runs
                code = np.uint64(xk & ((np.int64(1) << nsig) - 1))
                length = nsig
                j = nsig
                while j < size:
                    rest = xk >> j
                    if rest == 0:  # group test 0 ends the plane
                        length += 1
                        break
                    p = j + _ctz(rest)  # the next set bit
                    if p < size - 1:  # 1, (p - j) zeros, 1
                        code |= (np.uint64(1) | (np.uint64(1) << np.uint64(p - j + 1))) << np.uint64(length)
                        length += p - j + 2
                        j = p + 1
                    else:  # 1, then zeros up to coefficient size-2; the last one's 1 is implied
                        code |= np.uint64(1) << np.uint64(length)
                        length += size - j
                        j = size
                nsig = j
                _put(data, bit, end, code, length)
                bit += length
                k -= 1


@numba.njit(parallel=True, cache=True, nogil=True)
def decode(data, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, y):
    """Decode every block into y (float32[n]); returns False if an exponent field is out of range.
    Parallel over tasks of GROUP blocks (each writes only its own blocks' elements)."""
    size = 16 if two_d else 4
    budget = rate * size
    ntasks = (nblocks + GROUP - 1) // GROUP
    bad = np.zeros(ntasks, np.uint8)
    for t in numba.prange(ntasks):
        q = np.empty(16, np.int64)
        u = np.empty(16, np.int64)
        out = np.empty(16, np.float32)
        base, r0, c0 = _origin(t * GROUP, n, h, w, two_d)
        for b in range(t * GROUP, min(nblocks, (t + 1) * GROUP)):
            if b > t * GROUP:
                base, r0, c0 = _next(base, r0, c0, h, w, two_d)
            bit = b * budget
            end = bit + budget
            efield = _peek(data, bit, exp_bits)
            bit += exp_bits
            if efield == 0:
                for k in range(size):
                    out[k] = 0.0
            else:
                if efield > 128 + exp_bias:
                    bad[t] = 1
                    efield = 128 + exp_bias
                emax = efield - exp_bias
                for i in range(size):
                    u[i] = 0
                nsig = 0
                k = 31
                lo = np.uint64(0)
                hi = np.uint64(0)
                while k >= 0 and bit < end:
                    # the plane's bits come from one 64-bit window (a plane needs at most 33 + 16 bits)
                    avail = min(end - bit, 64)
                    win = _window(data, bit)
                    used = 0
                    xk = np.int64(0)
                    live = True
                    if nsig > 0:  # verbatim bits of the coefficients already significant
                        used = min(nsig, avail)
                        xk = np.int64(win & ((np.uint64(1) << np.uint64(used)) - np.uint64(1)))
                        live = used == nsig
                    j = nsig
                    while live and j < size:
                        if used >= avail:
                            live = False
                            break
                        g = (win >> np.uint64(used)) & np.uint64(1)
                        used += 1
                        if g == 0:  # group test 0 ends the plane
                            break
                        m = size - 1 - j  # positions j .. size-2 are scanned for the next 1
                        if m == 0:
                            xk |= np.int64(1) << j
                            j = size
                        else:
                            look = min(m, avail - used)
                            run = np.int64((win >> np.uint64(used)) & ((np.uint64(1) << np.uint64(look)) - np.uint64(1)))
                            if run != 0:
                                z = _ctz(run)
                                xk |= np.int64(1) << (j + z)
                                used += z + 1
                                j += z + 1
                            else:
                                used += look
                                if look < m:
                                    live = False
                                    break
                                xk |= np.int64(1) << (size - 1)  # all zeros: the last one is implied
                                j = size
                        nsig = j
                    bit += used
                    # bit j of the plane -> bit (k & 7) of byte lane j; a byte of lanes is flushed into the
                    # coefficients when the next plane starts another byte, or at the end
                    sj = np.uint64(k & 7)
                    lo |= _spread(np.uint64(xk) & np.uint64(0xFF)) << sj
                    hi |= _spread((np.uint64(xk) >> np.uint64(8)) & np.uint64(0xFF)) << sj
                    if not live or k & 7 == 0:
                        _flush(u, size, lo, hi, np.int64(8 * (k >> 3)))
                        lo = np.uint64(0)
                        hi = np.uint64(0)
                    if not live:
                        break
                    k -= 1
                if lo != 0 or hi != 0:  # the loop ran out of budget between planes, mid-byte
                    _flush(u, size, lo, hi, np.int64(8 * ((k + 1) >> 3)))
                if two_d:
                    for i in range(16):
                        q[_PERM2[i]] = (u[i] ^ _NB) - _NB
                    for c in range(4):
                        _inv4(q, c, 4)
                    for r in range(4):
                        _inv4(q, 4 * r, 1)
                else:
                    for i in range(4):
                        q[i] = (u[i] ^ _NB) - _NB
                    _inv4(q, 0, 1)
                scale = _POW2[emax - precision + _POW_OFF]
                for k in range(size):
                    d = np.float64(q[k]) * scale  # exact: an integer times a power of two
                    out[k] = np.float32(min(max(d, -_F32_MAX), _F32_MAX))
            if two_d and r0 + 4 <= h and c0 + 4 <= w:
                for r in range(4):
                    row = base + (r0 + r) * w + c0
                    for c in range(4):
                        y[row + c] = out[4 * r + c]
            else:
                for k in range(size):
                    if _inside(base, r0, c0, k, n, h, w, two_d):
                        y[_at(base, r0, c0, k, n, h, w, two_d)] = out[k]
    return not bad.any()
