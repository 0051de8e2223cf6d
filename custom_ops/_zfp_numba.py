"""Compiled CPU backend of the ``zfp`` codec: the block coder of ``kernels/zfp.cu`` line for line (one block at
a time instead of one thread per block), so all three backends write the same words. Imported only when numba
is installed; ``custom_ops/zfp.py`` falls back to its vectorised NumPy coder otherwise."""
from __future__ import annotations

import math

import numba
import numpy as np

_PERM2 = np.array([0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15], dtype=np.int64)
_NB = np.int64(0xAAAAAAAA)
_F32_MAX = float(np.finfo(np.float32).max)
GROUP = 256  # blocks per parallel task: a multiple of 8, so a task's first bit (b * rate * 4 or 16) is word-aligned


@numba.njit(cache=True, inline="always")
def _origin(b, n, h, w, two_d):
    """(flat index of block b's plane, its first row, its first column); 1-D: (first index, 0, 0). Computed
    once per block: four integer divisions per element were about a third of the decoder's time."""
    if not two_d:
        return b * 4, 0, 0
    bc = (w + 3) // 4
    br = (h + 3) // 4
    p = b // (br * bc)
    rem = b - p * br * bc
    by = rem // bc
    return p * h * w, by * 4, (rem - by * bc) * 4


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


@numba.njit(parallel=True, cache=True, nogil=True)
def encode(x, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, data):
    """OR every block's bits into ``data`` (uint32, zeroed). Non-finite values of x are coded as 0.
    Parallel over tasks of GROUP blocks: each task's bits start on a word boundary, so no two tasks touch
    the same word."""
    size = 16 if two_d else 4
    budget = rate * size
    for t in numba.prange((nblocks + GROUP - 1) // GROUP):
        v = np.empty(16, np.float64)
        q = np.empty(16, np.int64)
        u = np.empty(16, np.int64)
        for b in range(t * GROUP, min(nblocks, (t + 1) * GROUP)):
            amax = 0.0
            base, r0, c0 = _origin(b, n, h, w, two_d)
            for k in range(size):
                f = x[_at(base, r0, c0, k, n, h, w, two_d)]
                if not np.isfinite(f):
                    f = np.float32(0.0)
                v[k] = f
                amax = max(amax, abs(f))
            if amax == 0.0:
                continue
            emax = math.frexp(amax)[1]  # amax holds a float32 value exactly
            bit = b * budget
            end = bit + budget
            efield = emax + exp_bias
            for i in range(exp_bits):
                if (efield >> i) & 1:
                    data[bit >> 5] |= np.uint32(1) << np.uint32(bit & 31)
                bit += 1
            for k in range(size):
                q[k] = np.int64(math.trunc(math.ldexp(v[k], precision - emax)))
            if two_d:
                for r in range(4):
                    _fwd4(q, 4 * r, 1)
                for c in range(4):
                    _fwd4(q, c, 4)
                for i in range(16):
                    u[i] = ((q[_PERM2[i]] + _NB) ^ _NB) & 0xFFFFFFFF
            else:
                _fwd4(q, 0, 1)
                for i in range(4):
                    u[i] = ((q[i] + _NB) ^ _NB) & 0xFFFFFFFF
            nsig = 0
            k = 31
            while k >= 0 and bit < end:
                xk = 0
                for i in range(size):
                    xk |= ((u[i] >> k) & 1) << i
                # the bit sequence of this plane, written while bit < end
                j = 0
                while j < nsig:
                    if bit < end and (xk >> j) & 1:
                        data[bit >> 5] |= np.uint32(1) << np.uint32(bit & 31)
                    bit += 1
                    j += 1
                while j < size:
                    rest = xk >> j
                    if bit < end and rest != 0:
                        data[bit >> 5] |= np.uint32(1) << np.uint32(bit & 31)
                    bit += 1
                    if rest == 0:
                        break
                    while j < size - 1:
                        one = (xk >> j) & 1
                        if bit < end and one:
                            data[bit >> 5] |= np.uint32(1) << np.uint32(bit & 31)
                        bit += 1
                        if one:
                            break
                        j += 1
                    j += 1
                    nsig = j
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
        out = np.empty(16, np.float64)
        for b in range(t * GROUP, min(nblocks, (t + 1) * GROUP)):
            bit = b * budget
            end = bit + budget
            efield = 0
            for i in range(exp_bits):
                efield |= np.int64((data[bit >> 5] >> np.uint32(bit & 31)) & np.uint32(1)) << i
                bit += 1
            if efield == 0:
                for k in range(size):
                    out[k] = 0.0
            else:
                if efield > 128 + exp_bias:
                    bad[t] = 1
                    efield = 128 + exp_bias
                emax = efield - exp_bias
                for i in range(16):
                    u[i] = 0
                nsig = 0
                live = True
                k = 31
                while k >= 0 and live:
                    xk = 0
                    j = 0
                    while j < nsig and live:
                        if bit >= end:
                            live = False
                            break
                        xk |= np.int64((data[bit >> 5] >> np.uint32(bit & 31)) & np.uint32(1)) << j
                        bit += 1
                        j += 1
                    while live and j < size:
                        if bit >= end:
                            live = False
                            break
                        g = (data[bit >> 5] >> np.uint32(bit & 31)) & np.uint32(1)
                        bit += 1
                        if g == 0:
                            break
                        while j < size - 1:
                            if bit >= end:
                                live = False
                                break
                            one = (data[bit >> 5] >> np.uint32(bit & 31)) & np.uint32(1)
                            bit += 1
                            if one:
                                xk |= np.int64(1) << j
                                break
                            j += 1
                        if not live:
                            break
                        if j == size - 1:
                            xk |= np.int64(1) << j
                        j += 1
                        nsig = j
                    for i in range(size):
                        u[i] |= ((xk >> i) & 1) << k
                    k -= 1
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
                for k in range(size):
                    d = math.ldexp(np.float64(q[k]), emax - precision)
                    out[k] = min(max(d, -_F32_MAX), _F32_MAX)
            base, r0, c0 = _origin(b, n, h, w, two_d)
            for k in range(size):
                if _inside(base, r0, c0, k, n, h, w, two_d):
                    y[_at(base, r0, c0, k, n, h, w, two_d)] = np.float32(out[k])
    return not bad.any()
