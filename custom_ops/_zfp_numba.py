"""Compiled CPU backend of the ``zfp`` codec: writes the same words as ``kernels/zfp.cu`` and the NumPy coder
(``custom_ops/zfp.py`` has the format).

Work is split into tasks of GROUP blocks (``prange``: fixed rate puts block ``b`` at bit ``b · budget``, and a
task's first bit is word-aligned, so tasks share no word). Inside a task, everything that is the same
arithmetic for every block runs as loops over the task's blocks on structure-of-arrays tables (one row per
coefficient position, one column per block), which LLVM vectorises:

- encode: gather, block exponent, block-floating-point (integer shifts of the float32 mantissas: exactly
  ``trunc(x · 2**(26 − emax))``), the decorrelating transform and negabinary in int32 (|coefficient| < 2**30),
  then a 16×16 bit-matrix transpose (both 16-bit halves of the words at once) that turns the 16 coefficients
  into the 32 bit planes;
- decode: the same transpose back, negabinary, inverse transform (int64: a corrupt stream may decode to any
  32-bit pattern) and the float conversion.

Only the embedded bit-plane coder is serial per block. The encoder codes a plane without a loop over its
runs: ZFP's group test writes the plane's bits from the first not-yet-significant coefficient up to its
highest set bit with a 1 inserted before the first and after every set bit (the group bits), ending in a 0
unless the last coefficient's implied 1 ends the plane; the insertion is one table lookup per byte (``_EXPAND``).
The decoder reads each plane from one 64-bit window, a run (count-trailing-zeros) at a time; only the plane
the budget cuts goes through the loop that checks every read against the budget.
Imported only when numba is installed; ``custom_ops/zfp.py`` falls back to its vectorised NumPy coder otherwise.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

_PERM2 = np.array([0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15], dtype=np.int64)
_NB = np.int64(0xAAAAAAAA)
_NB32 = np.uint32(0xAAAAAAAA)
_F32_MAX = float(np.finfo(np.float32).max)
GROUP = 256  # blocks per parallel task: a multiple of 8, so a task's first bit (b * rate * 4 or 16) is word-aligned
# 2**e for the decoder's block scale factors, e in [-_POW_OFF, _POW_OFF]: x * 2**(emax - precision) is exact in
# float64, so it equals ldexp without a libm call.
_POW_OFF = 400
_POW2 = np.array([math.ldexp(1.0, e) for e in range(-_POW_OFF, _POW_OFF + 1)], dtype=np.float64)
# The 16x16 transpose's stages: (distance, mask of the bits that move, in both 16-bit halves of a word).
_TRANSPOSE = ((8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333), (1, 0x55555555))


def _expand_table() -> np.ndarray:
    """For every byte: its 8 bits, lowest first, with a 1 inserted after every set bit (8 + popcount bits)."""
    out = np.zeros(256, dtype=np.uint64)
    for v in range(256):
        code, pos = 0, 0
        for q in range(8):
            bit = (v >> q) & 1
            code |= bit << pos
            pos += 1
            if bit:
                code |= 1 << pos
                pos += 1
        out[v] = code
    return out


_EXPAND = _expand_table()


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


@intrinsic
def _popcount(typingctx, x):  # noqa: ANN001, ANN202
    """Number of set bits (LLVM's ctpop)."""
    sig = x(x)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.ctpop(args[0])

    return sig, codegen


@numba.njit(cache=True, inline="always")
def _next(base, r0, c0, h, w, two_d):
    """Origin (plane's flat index, first row, first column; 1-D: first index) of the block after the one at
    (base, r0, c0), without integer divisions."""
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
def _origin(b, h, w, two_d):
    if not two_d:
        return b * 4, 0, 0
    bc = (w + 3) // 4
    br = (h + 3) // 4
    p = b // (br * bc)
    rem = b - p * br * bc
    by = rem // bc
    return p * h * w, by * 4, (rem - by * bc) * 4


@numba.njit(cache=True, inline="always")
def _gather(xb, n, h, w, two_d, b0, nb, v):
    """v[k, j] = bits of value k of block b0 + j, clamped into the tensor (edge padding repeats the last row /
    column / element); 1-D blocks fill rows 0-3 only."""
    base, r0, c0 = _origin(b0, h, w, two_d)
    for j in range(nb):
        if j > 0:
            base, r0, c0 = _next(base, r0, c0, h, w, two_d)
        if two_d and r0 + 4 <= h and c0 + 4 <= w:  # interior block: four rows of four, no clamping
            for r in range(4):
                row = base + (r0 + r) * w + c0
                for c in range(4):
                    v[4 * r + c, j] = xb[row + c]
        elif two_d:
            for r in range(4):
                row = base + min(r0 + r, h - 1) * w
                for c in range(4):
                    v[4 * r + c, j] = xb[row + min(c0 + c, w - 1)]
        else:
            for c in range(4):
                v[c, j] = xb[min(base + c, n - 1)]


@numba.njit(cache=True, inline="always")
def _fwd4(q, a, b, c, d, nb):
    """The forward lifting on rows a, b, c, d of q (int32), for every block."""
    ra, rb, rc, rd = q[a], q[b], q[c], q[d]
    for j in range(nb):
        a0, a1, a2, a3 = ra[j], rb[j], rc[j], rd[j]
        d0 = a0 - a1
        s0 = (a1 + (d0 >> 1)) << 1
        d1 = a2 - a3
        s1 = (a3 + (d1 >> 1)) << 1
        dd = s0 - s1
        ss = (s1 + (dd >> 1)) << 1
        ra[j], rb[j], rc[j], rd[j] = ss, dd, d0, d1


@numba.njit(cache=True, inline="always")
def _inv4(q, a, b, c, d, nb):
    ra, rb, rc, rd = q[a], q[b], q[c], q[d]
    for j in range(nb):
        ss, dd, d0, d1 = ra[j], rb[j], rc[j], rd[j]
        s1 = (ss >> 1) - (dd >> 1)
        s0 = dd + s1
        a1 = (s0 >> 1) - (d0 >> 1)
        a0 = d0 + a1
        a3 = (s1 >> 1) - (d1 >> 1)
        a2 = d1 + a3
        ra[j], rb[j], rc[j], rd[j] = a0, a1, a2, a3


@numba.njit(cache=True, inline="always")
def _transpose(u, nb):
    """Per block (column j of the uint32 rows u[0..15]): bit k of word i <-> bit i of word k, in the low and
    the high 16-bit halves at once. Coefficients -> planes: word k holds plane k (low half) and plane k + 16
    (high half); it is its own inverse."""
    for d, mask in _TRANSPOSE:
        m = np.uint32(mask)
        sd = np.uint32(d)
        for i in range(16):
            if i & d:
                continue
            ra, rb = u[i], u[i + d]
            for j in range(nb):
                a, b = ra[j], rb[j]
                t = ((a >> sd) ^ b) & m
                rb[j] = b ^ t
                ra[j] = a ^ (t << sd)


@numba.njit(cache=True, inline="always")
def _plane(v, k, j):
    """Bit plane k of block j from the transposed words (bit i = coefficient i)."""
    return np.uint64((v[k & 15, j] >> np.uint32(16 * (k >> 4))) & np.uint32(0xFFFF))


@numba.njit(cache=True, inline="always")
def _put(buf, wpos, acc, nacc, code, length):
    """Append ``length`` (<= 33) bits to the register acc (nacc <= 31 bits pending), store its two words, and
    advance past the full ones."""
    acc |= code << np.uint64(nacc)
    nacc += length
    buf[wpos] = np.uint32(acc & np.uint64(0xFFFFFFFF))
    buf[wpos + 1] = np.uint32(acc >> np.uint64(32))
    adv = nacc >> 5
    sh = np.uint64(16 * adv)  # two shifts: a 64-bit shift by 64 is undefined
    return wpos + adv, (acc >> sh) >> sh, nacc & 31


@numba.njit(cache=True, inline="always")
def _plane_code(x, nsig, size):
    """(code, length) of one bit plane x (bit i = coefficient i) given the nsig coefficients already
    significant: their bits verbatim, then ZFP's group tests and runs (module doc). Afterwards the significant
    ones are those up to the highest set bit of this plane or an earlier one."""
    # branch-free (the cases are data-dependent and would mispredict): selects only
    one = np.uint64(1)
    verb = x & ((one << np.uint64(nsig)) - one)
    r = x >> np.uint64(nsig)
    nz = np.int64(r != 0)
    pt = 63 - np.int64(_clz(r | one))  # highest set bit: every coefficient up to it becomes significant
    low = r & np.uint64(0xFF)
    e = _EXPAND[low] | (_EXPAND[(r >> np.uint64(8)) & np.uint64(0xFF)] << np.uint64(8 + np.int64(_popcount(low))))
    full = pt + 1 + np.int64(_popcount(r))  # bits 0..pt, each set bit followed by a group 1
    # the last coefficient's 1 is implied: neither it nor a group bit after it is written; otherwise the group
    # bit after the last set bit is 0 and ends the plane
    last = np.int64(pt == size - nsig - 1)
    e &= (one << np.uint64(max(full - 1 - last, 0))) - one
    length = full - 2 * last + 1 if nz else 1  # r == 0: one group test 0
    code = verb | ((np.uint64(nz) | (e << one)) << np.uint64(nsig))
    return code, nsig + length


@numba.njit(parallel=True, cache=True, nogil=True)
def encode(x, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, data):
    """Write every block's bits into ``data`` (uint32, zeroed). x must be finite (the caller zeroes NaN/±Inf).
    ``precision`` must be 26 or less (int32 coefficients)."""
    size = 16 if two_d else 4
    budget = rate * size
    xb = x.view(np.uint32)
    ntasks = (nblocks + GROUP - 1) // GROUP
    task_words = GROUP * budget // 32
    for t in numba.prange(ntasks):
        b0 = t * GROUP
        nb = min(nblocks, b0 + GROUP) - b0
        v = np.zeros((16, GROUP), np.uint32)  # float bits, then negabinary coefficients, then bit planes
        q = np.zeros((16, GROUP), np.int32)
        amax = np.zeros(GROUP, np.uint32)
        emax = np.zeros(GROUP, np.int32)
        scale = np.zeros(GROUP, np.float32)
        buf = np.zeros(task_words + 3, np.uint32)
        _gather(xb, n, h, w, two_d, b0, nb, v)
        for k in range(size):  # the largest magnitude of every block
            row = v[k]
            for j in range(nb):
                amax[j] = max(amax[j], row[j] & np.uint32(0x7FFFFFFF))
        tiny = False
        for j in range(nb):  # frexp exponent of the largest magnitude, from its bits
            a = amax[j]
            if a >= np.uint32(0x800000):
                emax[j] = np.int32(a >> np.uint32(23)) - 126
            elif a != 0:  # subnormal m * 2**-149: bit length of m - 149
                emax[j] = 64 - np.int32(_clz(np.uint64(a))) - 149
            e = precision - emax[j]
            tiny |= e > 127
            scale[j] = _POW2[min(e, 127) + _POW_OFF]
        # q = trunc(x * 2**(precision - emax)): exact in float32 where the scale is a float32 (a product >= 1 is
        # a normal float32 and a power-of-two scaling of it is exact; smaller ones truncate to 0 either way)
        fv = v.view(np.float32)
        for k in range(size):
            row, qr = fv[k], q[k]
            for j in range(nb):
                qr[j] = np.int32(row[j] * scale[j])
        if tiny:  # blocks of magnitude < 2**-101: from the mantissa m and exponent e of x = m * 2**(e' - 150)
            for j in range(nb):
                if precision - emax[j] <= 127:
                    continue
                for k in range(size):
                    bits = v[k, j]
                    e = np.int64((bits >> np.uint32(23)) & np.uint32(0xFF))
                    m = np.int64(bits & np.uint32(0x7FFFFF)) | (np.int64(e != 0) << 23)
                    sh = max(e, 1) - 150 + precision - emax[j]  # <= 2
                    mag = (m << max(sh, 0)) >> min(max(-sh, 0), 63)
                    q[k, j] = -mag if bits >> np.uint32(31) else mag
        if two_d:
            for r in range(4):
                _fwd4(q, 4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3, nb)
            for c in range(4):
                _fwd4(q, c, c + 4, c + 8, c + 12, nb)
            for i in range(16):
                row, qr = v[i], q[_PERM2[i]]
                for j in range(nb):
                    row[j] = (np.uint32(qr[j]) + _NB32) ^ _NB32
        else:
            _fwd4(q, 0, 1, 2, 3, nb)
            for i in range(4):
                row, qr = v[i], q[i]
                for j in range(nb):
                    row[j] = (np.uint32(qr[j]) + _NB32) ^ _NB32
            for i in range(4, 16):
                v[i, :nb] = 0
        orm = np.zeros(GROUP, np.uint32)  # the OR of each block's coefficients: its highest nonempty plane
        for k in range(size):
            row = v[k]
            for j in range(nb):
                orm[j] |= row[j]
        _transpose(v, nb)  # v[k & 15] >> (16 * (k >> 4)): plane k
        for j in range(nb):
            if amax[j] == 0:
                continue  # all-zero block: exponent field 0, nothing else (the buffer is zeroed)
            start = j * budget
            # the block's bits go through a register (acc holds bits nacc.. of word wpos on): plain stores,
            # no read-modify-write of the word the previous code went into
            wpos = start >> 5
            nacc = start & 31
            acc = np.uint64(buf[wpos])
            wpos, acc, nacc = _put(buf, wpos, acc, nacc, np.uint64(emax[j] + exp_bias), exp_bits)
            # the planes above the highest nonempty one are one 0 (group test) each
            top = 63 - np.int64(_clz(np.uint64(orm[j]))) if orm[j] != 0 else -1
            bit = exp_bits + 31 - top
            wpos, acc, nacc = _put(buf, wpos, acc, nacc, np.uint64(0), min(31 - top, budget - exp_bits))
            nsig = 0
            seen = np.uint64(0)  # OR of the planes coded so far: nsig is its bit length (no serial chain
            k = top              # through each plane's code)
            while k >= 0 and bit < budget and nsig < size:  # planes with group tests
                x_k = _plane(v, k, j)
                code, length = _plane_code(x_k, nsig, size)
                seen |= x_k
                nsig = 64 - np.int64(_clz(seen)) if seen != 0 else 0
                if length > budget - bit:  # cut at the budget
                    length = budget - bit
                    code &= (np.uint64(1) << np.uint64(length)) - np.uint64(1)
                wpos, acc, nacc = _put(buf, wpos, acc, nacc, code, length)
                bit += length
                k -= 1
            while k >= 0 and bit < budget:  # every coefficient significant: planes verbatim, 32 bits at a time
                count = min(32 // size, k + 1)
                chunk = np.uint64(0)
                for i in range(count):
                    chunk |= _plane(v, k - i, j) << np.uint64(size * i)
                length = min(size * count, budget - bit)
                chunk &= (np.uint64(1) << np.uint64(length)) - np.uint64(1)
                wpos, acc, nacc = _put(buf, wpos, acc, nacc, chunk, length)
                bit += length
                k -= count
        w0 = t * task_words
        for i in range(min(task_words, data.size - w0)):
            data[w0 + i] = buf[i]


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


@numba.njit(cache=True, inline="always")
def _peek(data, bit, nbits):
    """The ``nbits`` (<= 32) stream bits from ``bit`` as an integer."""
    return np.int64(_window(data, bit) & ((np.uint64(1) << np.uint64(nbits)) - np.uint64(1)))


@numba.njit(parallel=True, cache=True, nogil=True)
def decode(data, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, y):
    """Decode every block into y (float32[n]); returns False if an exponent field is out of range."""
    size = 16 if two_d else 4
    budget = rate * size
    ntasks = (nblocks + GROUP - 1) // GROUP
    bad = np.zeros(ntasks, np.uint8)
    for t in numba.prange(ntasks):
        b0 = t * GROUP
        nb = min(nblocks, b0 + GROUP) - b0
        u = np.zeros((16, GROUP), np.uint32)  # bit planes, then negabinary coefficients
        q = np.empty((16, GROUP), np.int64)
        scale = np.zeros(GROUP, np.float64)
        for j in range(nb):
            bit = (b0 + j) * budget
            end = bit + budget
            efield = _peek(data, bit, exp_bits)
            bit += exp_bits
            if efield == 0:
                continue  # scale 0: the block decodes to +0.0
            if efield > 128 + exp_bias:
                bad[t] = 1
                efield = 128 + exp_bias
            scale[j] = _POW2[efield - exp_bias - precision + _POW_OFF]
            nsig = 0
            k = 31
            while k >= 0 and bit < end:
                # the plane's bits come from one 64-bit window (a plane needs at most 33 bits)
                win = _window(data, bit)
                if end - bit >= 2 * size + 1:  # the whole plane (<= 2 * size + 1 - nsig bits) is inside the budget
                    used = nsig
                    xk = np.int64(win & ((np.uint64(1) << np.uint64(nsig)) - np.uint64(1)))
                    j2 = nsig
                    while j2 < size:
                        g = (win >> np.uint64(used)) & np.uint64(1)
                        used += 1
                        if g == 0:  # group test 0 ends the plane
                            break
                        # positions j2 .. size-2 are scanned for the next 1; none: the last one is implied
                        run = np.int64((win >> np.uint64(used)) & ((np.uint64(1) << np.uint64(size - 1 - j2)) - np.uint64(1)))
                        z = np.int64(_ctz(run)) if run != 0 else size - 1 - j2
                        xk |= np.int64(1) << (j2 + z)
                        used += z + (run != 0)
                        j2 += z + 1
                    nsig = j2
                    bit += used
                    u[k & 15, j] |= np.uint32(xk) << np.uint32(16 * (k >> 4))
                    k -= 1
                    continue
                avail = end - bit
                used = 0
                xk = np.int64(0)
                live = True
                if nsig > 0:  # verbatim bits of the coefficients already significant
                    used = min(nsig, avail)
                    xk = np.int64(win & ((np.uint64(1) << np.uint64(used)) - np.uint64(1)))
                    live = used == nsig
                j2 = nsig
                while live and j2 < size:
                    if used >= avail:
                        live = False
                        break
                    g = (win >> np.uint64(used)) & np.uint64(1)
                    used += 1
                    if g == 0:  # group test 0 ends the plane
                        break
                    m = size - 1 - j2  # positions j2 .. size-2 are scanned for the next 1
                    if m == 0:
                        xk |= np.int64(1) << j2
                        j2 = size
                    else:
                        look = min(m, avail - used)
                        run = np.int64((win >> np.uint64(used)) & ((np.uint64(1) << np.uint64(look)) - np.uint64(1)))
                        if run != 0:
                            z = _ctz(run)
                            xk |= np.int64(1) << (j2 + z)
                            used += z + 1
                            j2 += z + 1
                        else:
                            used += look
                            if look < m:
                                live = False
                                break
                            xk |= np.int64(1) << (size - 1)  # all zeros: the last one is implied
                            j2 = size
                    nsig = j2
                bit += used
                u[k & 15, j] |= np.uint32(xk) << np.uint32(16 * (k >> 4))
                if not live:
                    break
                k -= 1
        _transpose(u, nb)  # planes -> negabinary coefficients
        if two_d:
            for i in range(16):
                ur, qr = u[i], q[_PERM2[i]]
                for j in range(nb):
                    qr[j] = (np.int64(ur[j]) ^ _NB) - _NB
            for c in range(4):
                _inv4(q, c, c + 4, c + 8, c + 12, nb)
            for r in range(4):
                _inv4(q, 4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3, nb)
        else:
            for i in range(4):
                ur, qr = u[i], q[i]
                for j in range(nb):
                    qr[j] = (np.int64(ur[j]) ^ _NB) - _NB
            _inv4(q, 0, 1, 2, 3, nb)
        out = u.view(np.float32)  # the coefficients are no longer needed: reuse their rows for the values
        for k in range(size):
            qr, orow = q[k], out[k]
            for j in range(nb):
                d = np.float64(qr[j]) * scale[j]  # exact: an integer times a power of two
                orow[j] = np.float32(min(max(d, -_F32_MAX), _F32_MAX))
        base, r0, c0 = _origin(b0, h, w, two_d)
        for j in range(nb):
            if j > 0:
                base, r0, c0 = _next(base, r0, c0, h, w, two_d)
            if two_d:
                for r in range(min(4, h - r0)):
                    row = base + (r0 + r) * w + c0
                    for c in range(min(4, w - c0)):
                        y[row + c] = out[4 * r + c, j]
            else:
                for c in range(min(4, n - base)):
                    y[base + c] = out[c, j]
    return not bad.any()
