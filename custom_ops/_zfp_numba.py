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


@numba.njit(cache=True, inline="always")
def _index(b, k, n, h, w, two_d):
    if not two_d:
        i = b * 4 + k
        return i if i < n else n - 1
    bc = (w + 3) // 4
    br = (h + 3) // 4
    p = b // (br * bc)
    rem = b - p * br * bc
    by = rem // bc
    bx = rem - by * bc
    r = min(by * 4 + (k >> 2), h - 1)
    c = min(bx * 4 + (k & 3), w - 1)
    return (p * h + r) * w + c


@numba.njit(cache=True, inline="always")
def _valid(b, k, n, h, w, two_d):
    if not two_d:
        return b * 4 + k < n
    bc = (w + 3) // 4
    br = (h + 3) // 4
    rem = b % (br * bc)
    by = rem // bc
    bx = rem - by * bc
    return by * 4 + (k >> 2) < h and bx * 4 + (k & 3) < w


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


@numba.njit(cache=True)
def encode(x, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, data):
    """OR every block's bits into ``data`` (uint32, zeroed). Non-finite values of x are coded as 0."""
    size = 16 if two_d else 4
    budget = rate * size
    v = np.empty(16, np.float64)
    q = np.empty(16, np.int64)
    u = np.empty(16, np.int64)
    for b in range(nblocks):
        amax = 0.0
        for k in range(size):
            f = x[_index(b, k, n, h, w, two_d)]
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


@numba.njit(cache=True)
def decode(data, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, y):
    """Decode every block into y (float32[n]); returns False if an exponent field is out of range."""
    size = 16 if two_d else 4
    budget = rate * size
    q = np.empty(16, np.int64)
    u = np.empty(16, np.int64)
    out = np.empty(16, np.float64)
    ok = True
    for b in range(nblocks):
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
                ok = False
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
        for k in range(size):
            if _valid(b, k, n, h, w, two_d):
                y[_index(b, k, n, h, w, two_d)] = np.float32(out[k])
    return ok
