"""Compiled kernels for the ``sz`` codec's block stage (bitstream in ``custom_ops/sz.py`` / ``kernels/sz.cu``).

Encode is two parallel passes over tasks of ``TASK_BLOCKS`` 32-element blocks, like the CUDA kernels'
rates/pack split: pass 1 quantizes, takes each block's bit width, marks outliers (one bit per element) and packs
the task's sign and magnitude planes into a bounded per-task scratch (``SCRATCH_WORDS_PER_BLOCK``); after
prefix sums over the tasks, pass 2 copies each task's words to its offset and writes the outliers' flat
indices. The scratch is ~19 % of the input, never an n-sized temporary next to the activation being shrunk;
a task whose words outgrow it (ReLU activations at eb ~ 1e-3 of their scale need ~12 words a block) keeps
the blocks that fitted, and pass 2 copies those and runs pass 1's chunk code again on the rest only, packing
into the output.

Pass 1 works on L1-sized chunks of ``CHUNK_BLOCKS`` blocks: per block, fixed-trip 32-lane loops quantize and
take the deltas (into chunk arrays), then a second loop over the chunk takes the rates and packs the planes.
Quantization runs in float32 (8 lanes per AVX2 vector instead of 4) wherever that provably gives the same q
and the same error-check outcome as the float64 reference (``fast_recip32``); a block with any lane near a
rounding tie, NaN / Inf or a huge |q| takes the float64 path, whose operations are those of ``_quantize_cpu``
(no FMA contraction: numba compiles without fast-math). Payload bytes are the NumPy reference's, bit for bit.

Planes are gathered from byte lanes, 8 lanes per uint64 multiply, for blocks up to r = 16 (the low bytes give
planes 0-7, the second bytes planes 8-15); only wider blocks take a bit-by-bit loop. Decode spreads a block's
planes back into byte lanes (a table lookup per plane byte; one set of lanes for r <= 8, two for r <= 16),
takes each lane's magnitude and sign in a vectorised loop, undoes the deltas (one serial add per lane) and
converts in another vectorised loop.
"""
from __future__ import annotations

import numpy as np
from . import _jit
from ._jit import njit, prange  # numba's, or AOT-bound stand-ins (cpu/aot.py)

if _jit.AOT_LIB is None:  # LLVM's ctlz / ctpop, called only inside the kernels (not in the AOT copy: no numba)
    from .._zfp_numba import _clz, _popcount

__all__ = ["encode_blocks", "decode_blocks"]

# Signatures of the ahead-of-time compiled copies (cpu/aot.py; the types encode_blocks / decode_blocks pass).
AOT_SIGNATURES = {
    "_encode_rates": "void(f4[::1], f8, f8, f8, f4, u1[::1], u4[::1], i8[::1], i8[::1], u4[::1], i8, u1[:, :, ::1], "
                     "u8[:, :, ::1])",
    "_encode_pack": "void(f4[::1], f8, f8, f8, f4, u1[::1], u4[::1], i8[::1], i8[::1], u4[::1], i8[::1], u4[::1], i8, "
                    "u1[:, :, ::1], u8[:, :, ::1])",
    "_task_words": "void(u1[::1], i8[::1])",
    "_decode": "void(u1[::1], u4[::1], i8[::1], f8, f4[::1])",
}

BLOCK = 32
QMAX = (1 << 30) - 1
TASK_BLOCKS = 2048  # 64 Ki elements per parallel task
# Pass 1 keeps up to this many packed words per block of a task (r + 1 per block with r > 0) for pass 2 to
# copy: 6/32 of the input's size as a transient, instead of quantizing every element twice. ReLU activations
# at eb = 1 % of their range average r + 1 ~ 5; the blocks of a task past the budget are re-quantized in pass 2.
SCRATCH_WORDS_PER_BLOCK = 6
# Bit-plane packing of blocks with r <= 8 (|d| fits a byte): the 32 magnitudes are 32 bytes, i.e. four
# uint64 words of 8 lanes (r <= 16: four more for bits 8-15). Gathering bit j of 8 lanes into one byte is
# ((w >> j) & LSB) * GATHER >> 56; spreading a plane byte back into 8 lanes is a table lookup (SPREAD_LUT).
# 8x fewer operations than a lane-by-lane loop.
LSB = np.uint64(0x0101010101010101)
GATHER = np.uint64(0x0102040810204080)


_RINT_MAGIC = 6755399441055744.0  # 1.5 * 2**52


@njit(inline="always", cache=True)
def _rint(v):  # noqa: ANN001, ANN202
    """np.rint (ties to even) for |v| < 2**51 by the float64 magic-number addition, which vectorises where
    a libm call does not; larger |v| (and NaN / Inf) come out with |result| > QMAX or NaN / Inf, so they
    are outliers under both, with q = 0."""
    return (v + _RINT_MAGIC) - _RINT_MAGIC


# The float32 fast path of the quantizer (pass 1). With p = x / (2 eb) (real), recip32 = float32(1 / (2 eb)) and
# pf = float32(x * recip32): |pf - p| <= |p| 2**-22.9 (two float32 roundings) and the float64 path's product is
# within |p| 2**-53 of p. If |pf - rint(pf)| < 1/2 - |pf| 2**-19 (the subtraction is exact: Sterbenz), both lie
# strictly inside the same rounding interval, so rint(pf) == the float64 path's q, and |p - q| <= 1/2 - |pf|
# 2**-20, i.e. |x - q 2eb| <= eb - 2eb |pf| 2**-20, which leaves more room than the float64 path's rounding of
# q 2eb to float32 takes (|q| 2eb 2**-23.9, |q| <= |pf| + 1/2; q = 0 is exact): no lane that passes is an
# outlier. |pf| <= 2**22 keeps the float32 rint (magic-number addition) exact and |q| far below QMAX; NaN / Inf
# fail the test. The relative bounds need normal float32 products: the fast path runs only where
# 2**-100 <= 2 eb <= 2**100 (``fast_recip32``), so subnormal results only occur for q = 0 and tiny |x|.
_RINT_MAGIC32 = np.float32(12582912.0)  # 1.5 * 2**23
_HALF32 = np.float32(0.5)
_MARGIN32 = np.float32(2.0 ** -19)
_FAST_LIMIT32 = np.float32(2.0 ** 22)


def fast_recip32(twoeb: float) -> np.float32:
    """float32(1 / (2 eb)) where the float32 fast path is exact (see above), else 0 (float64 path only)."""
    if 2.0 ** -100 <= twoeb <= 2.0 ** 100:
        return np.float32(1.0 / twoeb)
    return np.float32(0.0)


@njit(inline="always", cache=True)
def _gather_plane(m0, m1, m2, m3, j):  # noqa: ANN001, ANN202
    """Bit j of 32 byte lanes (four uint64 of 8 lanes) as one 32-bit plane word."""
    sj = np.uint64(j)
    return np.uint32(((((m0 >> sj) & LSB) * GATHER) >> np.uint64(56))
                     | (((((m1 >> sj) & LSB) * GATHER) >> np.uint64(56)) << np.uint64(8))
                     | (((((m2 >> sj) & LSB) * GATHER) >> np.uint64(56)) << np.uint64(16))
                     | (((((m3 >> sj) & LSB) * GATHER) >> np.uint64(56)) << np.uint64(24)))


@njit(inline="always", cache=True)
def _outlier_lanes(xb, recip, twoeb, eb):  # noqa: ANN001, ANN202
    """The outlier lane bits of one block (bit k: lane k fails the error check, or is NaN / Inf / |q| > QMAX):
    the slow path, run only for the rare chunks that have an outlier."""
    obits = np.uint32(0)
    for k in range(xb.size):
        xd = np.float64(xb[k])
        qf = _rint(xd * recip)
        qf = qf if np.abs(qf) <= QMAX else 0.0
        err = np.abs(xd - np.float64(np.float32(qf * twoeb)))
        obits |= (np.uint32(1) - np.uint32(err <= eb)) << np.uint32(k)
    return obits


@njit(inline="always", cache=True)
def _encode_chunk(x, i0, lanes, recip, twoeb, eb, recip32, ql, mag, mag8, neg8, hi8, m64, n64, h64, rates,
                  outlier_bits, b0, sc, words, cap):  # noqa: ANN001, ANN202
    """Quantize, delta, rate and pack the blocks of x[i0:i0+lanes] (block b0 first), a chunk that stays in L1.
    Returns (words, outliers) after this chunk. ``ql`` (int32[33]) holds a block's q values at ``ql[1:]`` after
    a fixed 0, so the block-reset deltas are one fixed-trip loop. ``recip32`` > 0 enables the float32 fast
    path (see ``fast_recip32``), else every block takes the float64 path. Magnitudes (also their low bytes)
    and signs go to chunk-sized arrays first and are packed in a second loop: reading the bytes back as
    uint64 right after storing them would stall store forwarding."""
    nblk = (lanes + BLOCK - 1) // BLOCK
    bad = np.int32(0)
    for bl in range(nblk):
        o = bl * BLOCK
        blanes = min(BLOCK, lanes - o)
        slow = True
        if recip32 > 0 and blanes == BLOCK:
            # float32, 8 lanes per vector: q = rint(x * recip32) is the float64 path's q and the element passes
            # its error check wherever the product is far enough from a rounding tie (proof above
            # fast_recip32); a block with any lane too close takes the float64 path.
            unsafe = np.int32(0)
            for k in range(BLOCK):
                pf = x[i0 + o + k] * recip32
                rf = (pf + _RINT_MAGIC32) - _RINT_MAGIC32
                apf = np.abs(pf)
                ok = (np.abs(pf - rf) < _HALF32 - apf * _MARGIN32) & (apf <= _FAST_LIMIT32)  # NaN: not ok
                ql[1 + k] = np.int32(rf if ok else np.float32(0.0))
                unsafe |= np.int32(not ok)
            slow = unsafe != 0
        if slow:
            for k in range(blanes):  # the float64 operations of sz._quantize_cpu
                xd = np.float64(x[i0 + o + k])
                qf = _rint(xd * recip)
                qf = qf if np.abs(qf) <= QMAX else 0.0
                err = np.abs(xd - np.float64(np.float32(qf * twoeb)))
                ql[1 + k] = np.int32(qf)
                bad |= np.int32(not (err <= eb))   # NaN error (x NaN / Inf) is an outlier too
        for k in range(BLOCK):  # block-reset Lorenzo deltas; ql[0] == 0
            d = ql[1 + k] - ql[k]
            a = np.abs(d)
            mag[o + k] = np.uint32(a)
            mag8[o + k] = np.uint8(a & 0xFF)
            hi8[o + k] = np.uint8((a >> 8) & 0xFF)
            neg8[o + k] = np.uint8(d < 0)
        for k in range(blanes, BLOCK):  # padding lanes of the tensor's last block: delta 0
            mag[o + k] = 0
            mag8[o + k] = 0
            hi8[o + k] = 0
            neg8[o + k] = 0
    outs = 0
    for bl in range(nblk):
        b = b0 + bl
        ob = np.uint32(0)
        if bad != 0:
            xs = i0 + bl * BLOCK
            ob = _outlier_lanes(x[xs:min(xs + BLOCK, i0 + lanes)], recip, twoeb, eb)
            outs += np.int64(_popcount(ob))
        outlier_bits[b] = ob
        m = np.uint32(0)
        for k in range(BLOCK):
            m |= mag[bl * BLOCK + k]
        r = 32 - np.int64(_clz(np.uint32(m))) if m != 0 else 0
        rates[b] = r
        if r == 0:
            continue
        if words + r + 1 <= cap:  # once over, the task stays over: pass 2 redoes the blocks from here on
            w = words
            sc[w] = _gather_plane(n64[4 * bl], n64[4 * bl + 1], n64[4 * bl + 2], n64[4 * bl + 3], 0)
            if r <= 16:  # planes 0-7 from the low byte lanes, 8-15 from the high ones
                m0 = m64[4 * bl]
                m1 = m64[4 * bl + 1]
                m2 = m64[4 * bl + 2]
                m3 = m64[4 * bl + 3]
                for j in range(min(r, 8)):
                    sc[w + 1 + j] = _gather_plane(m0, m1, m2, m3, j)
                if r > 8:
                    h0 = h64[4 * bl]
                    h1 = h64[4 * bl + 1]
                    h2 = h64[4 * bl + 2]
                    h3 = h64[4 * bl + 3]
                    for j in range(8, r):
                        sc[w + 1 + j] = _gather_plane(h0, h1, h2, h3, j - 8)
            else:
                for j in range(r):
                    plane = np.uint32(0)
                    for k in range(BLOCK):
                        plane |= ((mag[bl * BLOCK + k] >> np.uint32(j)) & np.uint32(1)) << np.uint32(k)
                    sc[w + 1 + j] = plane
        words += r + 1
    return words, outs


CHUNK_BLOCKS = 64  # blocks per inner chunk of pass 1: 8 KiB of x, its q / magnitudes stay in L1


@njit(parallel=True, cache=True, nogil=True)
def _encode_rates(x, recip, twoeb, eb, recip32, rates, outlier_bits, task_words, task_outliers, scratch, cap, bytes8, words64):  # noqa: ANN001, ANN202
    """Pass 1: rates, outlier bits, per-task word and outlier counts; a task's packed words go to its ``cap``
    words of ``scratch`` while they fit (pass 2 then copies them instead of quantizing again). ``bytes8[t]``
    (uint8[3, span]: low bytes of |d|, signs, bits 8-15 of |d|) is task t's byte-lane workspace and
    ``words64[t]`` the same memory as uint64 (viewed in Python: the planes are gathered from 8 lanes at a time)."""
    n = x.size
    nb = rates.size
    span = CHUNK_BLOCKS * BLOCK
    for t in prange(task_words.size):
        ql = np.zeros(BLOCK + 1, dtype=np.int32)
        mag = np.empty(span, dtype=np.uint32)
        mag8 = bytes8[t, 0]
        neg8 = bytes8[t, 1]
        hi8 = bytes8[t, 2]
        m64 = words64[t, 0]
        n64 = words64[t, 1]
        h64 = words64[t, 2]
        sc = scratch[t * cap:(t + 1) * cap]
        words = 0
        outs = 0
        b_end = min(nb, (t + 1) * TASK_BLOCKS)
        for b0 in range(t * TASK_BLOCKS, b_end, CHUNK_BLOCKS):
            i0 = b0 * BLOCK
            lanes = min(span, n - i0)
            words, o = _encode_chunk(x, i0, lanes, recip, twoeb, eb, recip32, ql, mag, mag8, neg8, hi8, m64, n64, h64,
                                     rates, outlier_bits, b0, sc, words, cap)
            outs += o
        task_words[t] = words
        task_outliers[t] = outs


@njit(parallel=True, cache=True, nogil=True)
def _encode_pack(x, recip, twoeb, eb, recip32, rates, outlier_bits, word_start, outlier_start, data, idx, scratch,
                 cap, bytes8, words64):  # noqa: ANN001, ANN202
    """Pass 2: outlier indices, and each task's words at its offset, copied from ``scratch``; for a task whose
    words did not all fit there, the blocks that did (a prefix: pass 1 stops packing at the first block that
    overflows) are copied and pass 1's chunk code runs again on the rest, packing straight into ``data`` (it
    rewrites those blocks' rates and outlier bits with the same values). ``bytes8`` / ``words64``: pass 1's
    workspaces, free again."""
    n = x.size
    nb = rates.size
    span = CHUNK_BLOCKS * BLOCK
    for t in prange(word_start.size - 1):
        w = word_start[t]
        o = outlier_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            ob = outlier_bits[b]
            k = 0
            while ob:
                if ob & np.uint32(1):
                    idx[o] = b * BLOCK + k
                    o += 1
                ob >>= np.uint32(1)
                k += 1
        b_end = min(nb, (t + 1) * TASK_BLOCKS)
        count = word_start[t + 1] - w
        # the words pass 1 kept: all of the task's, or those of the blocks before the first that overflowed
        fit = count
        b_redo = b_end
        if count > cap:
            fit = 0
            for b in range(t * TASK_BLOCKS, b_end):
                r = np.int64(rates[b])
                if r > 0 and fit + r + 1 > cap:
                    b_redo = b
                    break
                fit += r + 1 if r > 0 else 0
        dst = data[w:w + fit]
        src = scratch[t * cap:t * cap + fit]
        for i in range(fit):
            dst[i] = src[i]
        if b_redo == b_end:
            continue
        rest = data[w + fit:word_start[t + 1]]
        ql = np.zeros(BLOCK + 1, dtype=np.int32)
        mag = np.empty(span, dtype=np.uint32)
        words = 0
        task_end = min(n, b_end * BLOCK)
        for b0 in range(b_redo, b_end, CHUNK_BLOCKS):  # chunks may start anywhere: only the task end bounds them
            i0 = b0 * BLOCK
            words, _ = _encode_chunk(x, i0, min(span, task_end - i0), recip, twoeb, eb, recip32, ql, mag,
                                     bytes8[t, 0], bytes8[t, 1], bytes8[t, 2], words64[t, 0], words64[t, 1],
                                     words64[t, 2], rates, outlier_bits, b0, rest, words, rest.size)


@njit(parallel=True, cache=True, nogil=True)
def _task_words(rates, task_words):  # noqa: ANN001, ANN202
    nb = rates.size
    for t in prange(task_words.size):
        words = 0
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            r = np.int64(rates[b])
            if r > 0:
                words += r + 1
        task_words[t] = words


# Byte v -> its 8 bits as 8 byte lanes of 0 / 1 (lane l = bit l): one load from a 2 KiB table (numba freezes
# a global array into the compiled code) instead of a multiply-and-mask spread (~30 % faster decode).
SPREAD_LUT = np.array([sum(((v >> lane) & 1) << (8 * lane) for lane in range(8)) for v in range(256)],
                      dtype=np.uint64)


@njit(inline="always", cache=True)
def _spread(v):  # noqa: ANN001, ANN202
    """The 8 bits of byte ``v`` as 8 byte lanes of 0 / 1 (lane l = bit l)."""
    return SPREAD_LUT[v]


@njit(parallel=True, cache=True, nogil=True)
def _decode(rates, data, word_start, twoeb, y):  # noqa: ANN001, ANN202
    n = y.size
    nb = rates.size
    for t in prange(word_start.size - 1):
        mag = np.empty(BLOCK, dtype=np.int32)
        lanes64 = np.empty(8, dtype=np.uint64)   # the block's lane bytes: low bytes 0-31, second bytes 32-63
        lanes8 = lanes64.view(np.uint8)
        w = word_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            r = np.int64(rates[b])
            yb = y[i0:i0 + BLOCK]
            if r == 0:
                for k in range(yb.size):
                    yb[k] = 0.0
                continue
            if r <= 16:  # four uint64 of 8 byte lanes (planes 0-7), four more for planes 8-15
                m0 = np.uint64(0)
                m1 = np.uint64(0)
                m2 = np.uint64(0)
                m3 = np.uint64(0)
                for j in range(min(r, 8)):
                    p = np.uint64(data[w + 1 + j])
                    sj = np.uint64(j)
                    m0 |= _spread(p & np.uint64(0xFF)) << sj
                    m1 |= _spread((p >> np.uint64(8)) & np.uint64(0xFF)) << sj
                    m2 |= _spread((p >> np.uint64(16)) & np.uint64(0xFF)) << sj
                    m3 |= _spread((p >> np.uint64(24)) & np.uint64(0xFF)) << sj
                h0 = np.uint64(0)
                h1 = np.uint64(0)
                h2 = np.uint64(0)
                h3 = np.uint64(0)
                for j in range(8, r):
                    p = np.uint64(data[w + 1 + j])
                    sj = np.uint64(j - 8)
                    h0 |= _spread(p & np.uint64(0xFF)) << sj
                    h1 |= _spread((p >> np.uint64(8)) & np.uint64(0xFF)) << sj
                    h2 |= _spread((p >> np.uint64(16)) & np.uint64(0xFF)) << sj
                    h3 |= _spread((p >> np.uint64(24)) & np.uint64(0xFF)) << sj
                # the lane words stored as words and read back as bytes (store forwarding serves a narrower
                # load), so magnitude and sign per lane are one vectorised loop; then the prefix sum
                lanes64[0] = m0
                lanes64[1] = m1
                lanes64[2] = m2
                lanes64[3] = m3
                lanes64[4] = h0
                lanes64[5] = h1
                lanes64[6] = h2
                lanes64[7] = h3
                sign = data[w]
                for k in range(BLOCK):
                    a = np.int32(lanes8[k]) | (np.int32(lanes8[BLOCK + k]) << np.int32(8))
                    s = -np.int32((sign >> np.uint32(k)) & np.uint32(1))  # 0 or -1
                    mag[k] = (a ^ s) - s
                for k in range(1, BLOCK):
                    mag[k] += mag[k - 1]
            else:
                for k in range(BLOCK):
                    mag[k] = 0
                for j in range(r):
                    p = data[w + 1 + j]
                    for k in range(BLOCK):
                        mag[k] |= np.int32((p >> np.uint32(k)) & np.uint32(1)) << np.int32(j)
                sign = data[w]
                acc = np.int32(0)
                for k in range(BLOCK):
                    s = -np.int32((sign >> np.uint32(k)) & np.uint32(1))  # 0 or -1
                    acc += (mag[k] ^ s) - s
                    mag[k] = acc
            for k in range(yb.size):
                yb[k] = np.float32(np.float64(mag[k]) * twoeb)
            w += r + 1


def _prefix(counts: np.ndarray) -> np.ndarray:
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts


def encode_blocks(flat: np.ndarray, eb: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rates uint8[nb], data uint8[...], outlier_idx int64[m]) of flat float32 x: sz._encode_blocks_cpu."""
    n = flat.size
    nb = -(-n // BLOCK)
    ntasks = -(-nb // TASK_BLOCKS)
    twoeb = 2.0 * eb
    recip = 1.0 / twoeb
    rates = np.empty(nb, dtype=np.uint8)
    outlier_bits = np.empty(nb, dtype=np.uint32)
    task_words = np.empty(ntasks, dtype=np.int64)
    task_outliers = np.empty(ntasks, dtype=np.int64)
    cap = TASK_BLOCKS * SCRATCH_WORDS_PER_BLOCK
    scratch = np.empty(ntasks * cap, dtype=np.uint32)
    bytes8 = np.empty((ntasks, 3, CHUNK_BLOCKS * BLOCK), dtype=np.uint8)
    _encode_rates(flat, recip, twoeb, eb, fast_recip32(twoeb), rates, outlier_bits, task_words, task_outliers, scratch, cap, bytes8,
                  bytes8.view(np.uint64))
    word_start = _prefix(task_words)
    outlier_start = _prefix(task_outliers)
    data = np.empty(int(word_start[-1]), dtype=np.uint32)
    idx = np.empty(int(outlier_start[-1]), dtype=np.int64)
    _encode_pack(flat, recip, twoeb, eb, fast_recip32(twoeb), rates, outlier_bits, word_start, outlier_start, data, idx,
                 scratch, cap, bytes8, bytes8.view(np.uint64))
    return rates, data.view(np.uint8), idx


def decode_blocks(rates: np.ndarray, data: np.ndarray, n: int, eb: float) -> np.ndarray:
    """Flat float32[n] (outliers not patched) from a payload ``sz._check_payload`` has validated."""
    nb = rates.size
    task_words = np.empty(-(-nb // TASK_BLOCKS), dtype=np.int64)
    _task_words(rates, task_words)
    word_start = _prefix(task_words)
    data = np.ascontiguousarray(data)
    if data.ctypes.data % 4:  # the kernel reads 32-bit words
        data = data.copy()
    data32 = data.view(np.uint32)
    y = np.empty(n, dtype=np.float32)
    _decode(rates, data32, word_start, 2.0 * eb, y)
    return y
