"""Compiled CPU backend of the ``zfp`` codec (bitstream v3): writes the same words as ``kernels/zfp.cu`` and
the NumPy coder (``custom_ops/zfp.py`` has the format).

Work is split into tasks of GROUP blocks (``prange``: fixed rate puts block ``b`` at bit ``b · budget``, and a
task's first bit is word-aligned, so tasks share no word). Inside a task, everything that is the same
arithmetic for every block runs as loops over the task's blocks on structure-of-arrays tables (one row per
coefficient position, one column per block), which LLVM vectorises: gather, block exponent, block floating
point (float32 products by an exact power of two), ZFP's lifting in int32 (every intermediate is cast back to
int32: numba widens int32 arithmetic to int64, which would halve the vector lanes), the groups' magnitude ORs;
the header fields, the step (closed form) and the fixed-width packing / unpacking of the 16 fields (per
coefficient: widths, rounding, prefix-sum positions, then a select over the few words the positions reach);
on decode also the inverse lifting, the float conversion and the scatter. There is no serial bit loop; what
stays serial per block is the gather / scatter of its 16 values and the copy of its words.
Imported only when numba is installed; ``custom_ops/zfp.py`` falls back to its vectorised NumPy coder otherwise.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

_PERM2 = np.array([0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15], dtype=np.int64)
_PERM1 = np.array([0, 1, 2, 3], dtype=np.int64)
# group sizes over the sequency-ordered coefficients (zfp.GROUPS_2D / GROUPS_1D) and each position's group
_GS2 = np.array([1, 2, 3, 4, 6], dtype=np.int64)
_GS1 = np.array([4], dtype=np.int64)
_GOF2 = np.repeat(np.arange(5), _GS2).astype(np.int64)
_GOF1 = np.zeros(4, dtype=np.int64)
_FIELD_BITS = 2
_F32_MAX = float(np.finfo(np.float32).max)
GROUP = 256  # blocks per parallel task: a multiple of 8, so a task's first bit (b * rate * 4 or 16) is word-aligned
# 2**e for the block scale factors, e in [-_POW_OFF, _POW_OFF]: x * 2**(emax - precision) is exact in float64,
# so it equals ldexp without a libm call.
_POW_OFF = 400
_POW2 = np.array([math.ldexp(1.0, e) for e in range(-_POW_OFF, _POW_OFF + 1)], dtype=np.float64)


@intrinsic
def _clz(typingctx, x):  # noqa: ANN001, ANN202
    """Count leading zeros (x != 0)."""
    sig = x(x)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@intrinsic
def _popcount(typingctx, x):  # noqa: ANN001, ANN202
    """Number of set bits (LLVM's ctpop). Not used here: cpu/sz.py imports it (with _clz) from this module."""
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
    """ZFP's forward lifting on rows a, b, c, d of q (int32), for every block."""
    ra, rb, rc, rd = q[a], q[b], q[c], q[d]
    for j in range(nb):
        x, y, z, w = ra[j], rb[j], rc[j], rd[j]
        x = np.int32(np.int32(x + w) >> 1)
        w = np.int32(w - x)
        z = np.int32(np.int32(z + y) >> 1)
        y = np.int32(y - z)
        x = np.int32(np.int32(x + z) >> 1)
        z = np.int32(z - x)
        w = np.int32(np.int32(w + y) >> 1)
        y = np.int32(y - w)
        w = np.int32(w + np.int32(y >> 1))
        y = np.int32(y - np.int32(w >> 1))
        ra[j], rb[j], rc[j], rd[j] = x, y, z, w


@numba.njit(cache=True, inline="always")
def _inv4(q, a, b, c, d, nb):
    """ZFP's inverse lifting (int32: cannot overflow for |coefficient| <= 2**27, see zfp.py)."""
    ra, rb, rc, rd = q[a], q[b], q[c], q[d]
    for j in range(nb):
        x, y, z, w = ra[j], rb[j], rc[j], rd[j]
        y = np.int32(y + np.int32(w >> 1))
        w = np.int32(w - np.int32(y >> 1))
        y = np.int32(y + w)
        w = np.int32(np.int32(w << 1) - y)
        z = np.int32(z + x)
        x = np.int32(np.int32(x << 1) - z)
        y = np.int32(y + z)
        z = np.int32(np.int32(z << 1) - y)
        w = np.int32(w + x)
        x = np.int32(np.int32(x << 1) - w)
        ra[j], rb[j], rc[j], rd[j] = x, y, z, w


@numba.njit(cache=True, inline="always")
def _bitlen32(v):
    """Bit length of 0 <= v < 2**31 (0 for 0), from the exponent of its exact float64: vectorises."""
    e = np.int32(np.int64(np.float64(v).view(np.uint64) >> np.uint64(52)) - 1022)
    return max(e, np.int32(0))


@numba.njit(cache=True, inline="always")
def _ceil_div(a, n):
    """ceil(max(a, 0) / n) for small integers, through an exactly rounded float64 quotient: vectorises."""
    return np.int32(math.floor(np.float64(max(a, np.int32(0)) + n - 1) / np.float64(n)))


@numba.njit(cache=True, inline="always")
def _closed_step(d0, d1, d2, d3, d4, n0, n1, n2, n3, n4, av):
    """(s, U) from the declared bounds of up to 5 groups (sizes n, 0 for absent groups): see ``_header``."""
    N1 = n0
    S1 = np.int32(n0 * (d0 + 1))
    N2 = np.int32(N1 + n1)
    S2 = np.int32(S1 + n1 * (d1 + 1))
    N3 = np.int32(N2 + n2)
    S3 = np.int32(S2 + n2 * (d2 + 1))
    N4 = np.int32(N3 + n3)
    S4 = np.int32(S3 + n3 * (d3 + 1))
    N5 = np.int32(N4 + n4)
    S5 = np.int32(S4 + n4 * (d4 + 1))
    s = max(max(_ceil_div(np.int32(S1 - av), N1), _ceil_div(np.int32(S2 - av), N2)),
            max(max(_ceil_div(np.int32(S3 - av), N3), _ceil_div(np.int32(S4 - av), N4)),
                _ceil_div(np.int32(S5 - av), N5)))
    tot = max(max(max(np.int32(S1 - N1 * s), np.int32(S2 - N2 * s)), max(np.int32(S3 - N3 * s), np.int32(S4 - N4 * s))),
              max(np.int32(S5 - N5 * s), np.int32(0)))
    ne = (n0 if d0 >= s - 1 else np.int32(0)) + (n1 if d1 >= s - 1 else np.int32(0)) + \
        (n2 if d2 >= s - 1 else np.int32(0)) + (n3 if d3 >= s - 1 else np.int32(0)) + \
        (n4 if d4 >= s - 1 else np.int32(0))
    u = min(np.int32(ne if s > 0 else 0), np.int32(av - tot))
    return np.int32(s), np.int32(u)


@numba.njit(cache=True, inline="always")
def _header(gm, amax, emax, exp_bias, exp_bits, lcap, gs, ng, avail, Dt, hcode, sj, uj, nb):
    """Per block, in one loop over the blocks with the (up to 5) groups unrolled into scalars (vectorises):
    declared bounds D_g (suffix maxima of the groups' bit lengths, coded as 2-bit steps down from LCAP), the
    header word, the step s and U, the number of leading coefficients that take one of the bits left over.

    s in closed form: with S_k = sum_{g<k} n_g (D_g + 1) and N_k = sum_{g<k} n_g, the total at step p is
    max_k (S_k - N_k p) (each term max(0, D_g - p + 1) is >= D_g - p + 1 and >= 0, with equality for the
    groups still active, a prefix since D is non-increasing); it fits iff p >= (S_k - avail) / N_k for every
    k. The eligible groups for leftover bits (D_g >= s - 1) are a prefix too. All-zero blocks: header 0, s
    past every bound (no coefficient bits). Groups past ``ng`` (1-D blocks) have n = 0 and change nothing."""
    n0 = np.int32(gs[0])
    n1 = np.int32(gs[1]) if ng > 1 else np.int32(0)
    n2 = np.int32(gs[2]) if ng > 2 else np.int32(0)
    n3 = np.int32(gs[3]) if ng > 3 else np.int32(0)
    n4 = np.int32(gs[4]) if ng > 4 else np.int32(0)
    g0, g1, g2, g3, g4 = gm[0], gm[1], gm[2], gm[3], gm[4]
    d0r, d1r, d2r, d3r, d4r = Dt[0], Dt[1], Dt[2], Dt[3], Dt[4]
    two = ng > 1
    cap = np.int32(3)
    lc = np.int32(lcap)
    av = np.int32(avail)
    for j in range(nb):
        m4 = _bitlen32(g4[j])
        m3 = max(_bitlen32(g3[j]), m4)
        m2 = max(_bitlen32(g2[j]), m3)
        m1 = max(_bitlen32(g1[j]), m2)
        m0 = max(_bitlen32(g0[j]), m1)
        f0 = min(np.int32(lc - m0), cap)
        d0 = np.int32(lc - f0)
        f1 = min(np.int32(d0 - m1), cap)
        d1 = np.int32(d0 - f1)
        f2 = min(np.int32(d1 - m2), cap)
        d2 = np.int32(d1 - f2)
        f3 = min(np.int32(d2 - m3), cap)
        d3 = np.int32(d2 - f3)
        f4 = min(np.int32(d3 - m4), cap)
        d4 = np.int32(d3 - f4)
        code = np.uint32(emax[j] + exp_bias) | np.uint32(np.uint32(f0) << np.uint32(exp_bits))
        if two:
            code |= np.uint32(np.uint32(f1) << np.uint32(exp_bits + 2)) | np.uint32(np.uint32(f2) << np.uint32(exp_bits + 4))
            code |= np.uint32(np.uint32(f3) << np.uint32(exp_bits + 6)) | np.uint32(np.uint32(f4) << np.uint32(exp_bits + 8))
        s, u = _closed_step(d0, d1, d2, d3, d4, n0, n1, n2, n3, n4, av)
        zero = amax[j] == 0
        hcode[j] = np.uint32(0) if zero else code
        sj[j] = np.int32(lc + 1) if zero else np.int32(s)
        uj[j] = np.int32(0) if zero else np.int32(u)
        d0r[j], d1r[j], d2r[j], d3r[j], d4r[j] = d0, d1, d2, d3, d4


@numba.njit(cache=True, inline="always")
def _pack(q, perm, gof, size, hdr, hcode, sj, uj, Dt, pos, vals, out, nb, nwb):
    """out[k, j] = word k of block j's bits (from its first bit): header, then every coefficient at its width.
    Loops over the blocks, each touching few arrays (LLVM vectorises a loop only while the runtime alias checks
    between numba's arrays stay few: one loop doing all of this ran at scalar speed, ~2x slower): widths and
    steps, rounding, positions, the range of words the positions reach, then per reachable word a select
    (coefficient i's field lands in word pos >> 5 and the next; the word differs between blocks)."""
    wrow = np.empty(pos.size, np.int32)
    trow = np.empty(pos.size, np.int32)
    pst = np.empty(pos.size, np.int32)  # first bit of the current coefficient
    for k in range(nwb + 1):
        ok = out[k]
        for j in range(nb):
            ok[j] = 0
    o0 = out[0]
    for j in range(nb):
        pos[j] = hdr
        o0[j] = hcode[j]
    for i in range(size):
        qr, dr = q[perm[i]], Dt[gof[i]]
        ii = np.int32(i)
        for j in range(nb):  # bits and step exponent (the first uj[j] coefficients take a leftover bit)
            up = np.int32(ii < uj[j])
            wrow[j] = np.int32(max(np.int32(dr[j] - sj[j] + 1), np.int32(0)) + up)
            trow[j] = np.int32(sj[j] - up)
        for j in range(nb):  # round half up at the step, saturate to the width, keep the low w bits
            tt = np.uint32(trow[j])
            ww = np.uint32(wrow[j])
            half = np.int32(np.uint32(np.uint32(1) << tt) >> np.uint32(1))
            r = np.int32(np.int32(qr[j] + half) >> np.int32(tt))
            lim = np.int32(np.uint32(np.uint32(1) << ww) >> np.uint32(1))
            r = min(max(r, np.int32(-lim)), np.int32(lim - 1))
            vals[j] = np.uint32(np.uint32(r) & np.uint32(np.uint32(np.uint32(1) << ww) - np.uint32(1)))
        for j in range(nb):
            p = pos[j]
            pst[j] = p
            pos[j] = np.int32(p + wrow[j])
        lo = np.int32(1 << 30)
        hi = np.int32(0)
        for j in range(nb):  # fields of no bits write nothing: zero blocks must not widen the word range
            p = pst[j]
            nz = wrow[j] > 0
            lo = min(lo, p if nz else np.int32(1 << 30))
            hi = max(hi, p if nz else np.int32(0))
        for k in range(lo >> 5, min((hi >> 5) + 2, nwb + 1)):
            ok = out[k]
            kk = np.int32(k)
            for j in range(nb):
                p = pst[j]
                wd = np.int32(p >> 5)
                sh = np.uint32(p & 31)
                v = vals[j]
                lo_part = np.uint32(v << sh) if wd == kk else np.uint32(0)
                hi_part = np.uint32(np.uint32(v >> np.uint32(1)) >> np.uint32(31 - sh)) if wd + 1 == kk else np.uint32(0)
                ok[j] = np.uint32(ok[j] | lo_part | hi_part)


@numba.njit(parallel=True, cache=True, nogil=True)
def encode(x, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, data):
    """Write every block's bits into ``data`` (uint32, zeroed). x must be finite (the caller zeroes NaN/±Inf).
    ``precision`` must be 26 or less (int32 coefficients)."""
    size = 16 if two_d else 4
    budget = rate * size
    perm = _PERM2 if two_d else _PERM1
    gs = _GS2 if two_d else _GS1
    gof = _GOF2 if two_d else _GOF1
    ng = gs.size
    hdr = exp_bits + _FIELD_BITS * ng
    avail = budget - hdr
    lcap = precision + 1
    xb = x.view(np.uint32)
    ntasks = (nblocks + GROUP - 1) // GROUP
    task_words = GROUP * budget // 32
    nwb = (budget + 31) // 32  # words a block's bits span, counted from its first bit
    for t in numba.prange(ntasks):
        b0 = t * GROUP
        nb = min(nblocks, b0 + GROUP) - b0
        v = np.zeros((16, GROUP), np.uint32)  # float bits
        q = np.zeros((16, GROUP), np.int32)   # block-floating-point integers, then coefficients
        amax = np.zeros(GROUP, np.uint32)
        emax = np.zeros(GROUP, np.int32)
        scale = np.zeros(GROUP, np.float32)
        gm = np.zeros((5, GROUP), np.int32)   # OR of each group's |coefficient|
        hcode = np.zeros(GROUP, np.uint32)
        sj = np.zeros(GROUP, np.int32)
        uj = np.zeros(GROUP, np.int32)
        Dt = np.zeros((5, GROUP), np.int32)
        pos = np.zeros(GROUP, np.int32)
        vals = np.zeros(GROUP, np.uint32)
        out = np.zeros((nwb + 1, GROUP), np.uint32)
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
        else:
            _fwd4(q, 0, 1, 2, 3, nb)
        for i in range(size):
            qr, gr = q[perm[i]], gm[gof[i]]
            for j in range(nb):
                a = qr[j]
                gr[j] |= np.int32(max(a, np.int32(-a)))
        _header(gm, amax, emax, exp_bias, exp_bits, lcap, gs, ng, avail, Dt, hcode, sj, uj, nb)
        _pack(q, perm, gof, size, hdr, hcode, sj, uj, Dt, pos, vals, out, nb, nwb)
        if budget % 32 == 0:  # blocks start on word boundaries: plain stores
            for j in range(nb):
                for k in range(nwb):
                    buf[j * nwb + k] = out[k, j]
        else:
            for j in range(nb):
                start = j * budget
                base = start >> 5
                off = np.uint64(start & 31)
                for k in range(nwb):
                    wv = np.uint64(out[k, j]) << off
                    buf[base + k] |= np.uint32(wv & np.uint64(0xFFFFFFFF))
                    buf[base + k + 1] |= np.uint32(wv >> np.uint64(32))
        w0 = t * task_words
        for i in range(min(task_words, data.size - w0)):
            data[w0 + i] = buf[i]


@numba.njit(parallel=True, cache=True, nogil=True)
def decode(data, n, h, w, nblocks, two_d, rate, precision, exp_bits, exp_bias, y):
    """Decode every block into y (float32[n]); returns False if an exponent field is out of range."""
    size = 16 if two_d else 4
    budget = rate * size
    perm = _PERM2 if two_d else _PERM1
    gs = _GS2 if two_d else _GS1
    ng = gs.size
    hdr = exp_bits + _FIELD_BITS * ng
    avail = budget - hdr
    lcap = precision + 1
    ntasks = (nblocks + GROUP - 1) // GROUP
    nwb = (budget + 31) // 32
    gof = _GOF2 if two_d else _GOF1
    two = ng > 1
    n0 = np.int32(gs[0])
    n1 = np.int32(gs[1]) if ng > 1 else np.int32(0)
    n2 = np.int32(gs[2]) if ng > 2 else np.int32(0)
    n3 = np.int32(gs[3]) if ng > 3 else np.int32(0)
    n4 = np.int32(gs[4]) if ng > 4 else np.int32(0)
    lc = np.int32(lcap)
    av = np.int32(avail)
    bad = np.zeros(ntasks, np.uint8)
    for t in numba.prange(ntasks):
        b0 = t * GROUP
        nb = min(nblocks, b0 + GROUP) - b0
        q = np.zeros((16, GROUP), np.int32)
        out = np.empty((16, GROUP), np.float32)
        scale = np.zeros(GROUP, np.float64)
        inw = np.zeros((nwb + 1, GROUP), np.uint32)  # block j's words, counted from its first bit
        sj = np.zeros(GROUP, np.int32)
        uj = np.zeros(GROUP, np.int32)
        Dt = np.zeros((5, GROUP), np.int32)
        wrow = np.empty(GROUP, np.int32)
        trow = np.empty(GROUP, np.int32)
        pst = np.empty(GROUP, np.int32)
        pos = np.empty(GROUP, np.int32)
        for j in range(nb):
            start = (b0 + j) * budget
            base = start >> 5
            off = np.uint64(start & 31)
            for k in range(nwb + 1):
                lo = np.uint64(data[base + k]) if base + k < data.size else np.uint64(0)
                hi = np.uint64(data[base + k + 1]) if base + k + 1 < data.size else np.uint64(0)
                inw[k, j] = np.uint32(((hi << np.uint64(32)) | lo) >> off)
        # header fields -> scale, declared bounds, step, U (as the encoder's _header, one loop over the blocks)
        h0 = inw[0]
        d0r, d1r, d2r, d3r, d4r = Dt[0], Dt[1], Dt[2], Dt[3], Dt[4]
        for j in range(nb):
            hw = h0[j]
            efield = np.int32(hw & np.uint32((1 << exp_bits) - 1))
            if efield > 128 + exp_bias:
                bad[t] = 1
                efield = np.int32(128 + exp_bias)
            scale[j] = _POW2[efield - exp_bias - precision + _POW_OFF] if efield != 0 else 0.0
            f0 = np.int32((hw >> np.uint32(exp_bits)) & np.uint32(3))
            f1 = np.int32((hw >> np.uint32(exp_bits + 2)) & np.uint32(3)) if two else np.int32(0)
            f2 = np.int32((hw >> np.uint32(exp_bits + 4)) & np.uint32(3)) if two else np.int32(0)
            f3 = np.int32((hw >> np.uint32(exp_bits + 6)) & np.uint32(3)) if two else np.int32(0)
            f4 = np.int32((hw >> np.uint32(exp_bits + 8)) & np.uint32(3)) if two else np.int32(0)
            d0 = np.int32(lc - f0)
            d1 = np.int32(d0 - f1)
            d2 = np.int32(d1 - f2)
            d3 = np.int32(d2 - f3)
            d4 = np.int32(d3 - f4)
            s, u = _closed_step(d0, d1, d2, d3, d4, n0, n1, n2, n3, n4, av)
            zero = efield == 0
            sj[j] = np.int32(lc + 1) if zero else s
            uj[j] = np.int32(0) if zero else u
            d0r[j], d1r[j], d2r[j], d3r[j], d4r[j] = d0, d1, d2, d3, d4
            pos[j] = hdr
        for i in range(size):
            dr, qr = Dt[gof[i]], q[perm[i]]
            ii = np.int32(i)
            for j in range(nb):
                up = np.int32(ii < uj[j])
                wrow[j] = np.int32(max(np.int32(dr[j] - sj[j] + 1), np.int32(0)) + up)
                trow[j] = np.int32(sj[j] - up)
            lo = np.int32(1 << 30)
            hi = np.int32(0)
            for j in range(nb):
                p = pos[j]
                pst[j] = p
                pos[j] = np.int32(p + wrow[j])
                nz = wrow[j] > 0
                lo = min(lo, p if nz else np.int32(1 << 30))
                hi = max(hi, p if nz else np.int32(0))
            for j in range(nb):
                qr[j] = 0
            for k in range(lo >> 5, min((hi >> 5) + 2, nwb + 1)):
                ik = inw[k]
                kk = np.int32(k)
                for j in range(nb):
                    p = pst[j]
                    wd = np.int32(p >> 5)
                    sh = np.uint32(p & 31)
                    v = ik[j]
                    lo_part = np.uint32(v >> sh) if wd == kk else np.uint32(0)
                    hi_part = np.uint32(np.uint32(v << np.uint32(1)) << np.uint32(31 - sh)) if wd + 1 == kk else np.uint32(0)
                    qr[j] = np.int32(np.uint32(qr[j]) | lo_part | hi_part)
            for j in range(nb):  # keep the field's bits, sign-extend, scale by the step
                ww = np.uint32(wrow[j])
                raw = np.uint32(qr[j]) & np.uint32(np.uint32(np.uint32(1) << ww) - np.uint32(1))
                sgn = np.uint32(np.uint32(np.uint32(1) << ww) >> np.uint32(1))
                qr[j] = np.int32(np.int32(np.int32(raw ^ sgn) - np.int32(sgn)) << np.int32(trow[j]))
        if two_d:
            for c in range(4):
                _inv4(q, c, c + 4, c + 8, c + 12, nb)
            for r in range(4):
                _inv4(q, 4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3, nb)
        else:
            _inv4(q, 0, 1, 2, 3, nb)
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
