"""Compiled kernels for the ``sz`` codec's block stage (bitstream in ``custom_ops/sz.py`` / ``kernels/sz.cu``).

Encode is two parallel passes over tasks of ``TASK_BLOCKS`` 32-element blocks, like the CUDA kernels'
rates/pack split: pass 1 quantizes, takes each block's bit width, marks outliers (one bit per element) and packs
the task's sign and magnitude planes into a bounded per-task scratch (``SCRATCH_WORDS_PER_BLOCK``); after
prefix sums over the tasks, pass 2 copies each task's words to its offset (re-quantizing only a task whose
words did not fit the scratch) and writes the outliers' flat indices. The scratch is ~19 % of the input,
never an n-sized temporary next to the activation being shrunk. The float64
operations are those of ``_quantize_cpu`` (no FMA contraction: numba compiles without fast-math).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._zfp_numba import _clz, _popcount  # LLVM's ctlz / ctpop

__all__ = ["encode_blocks", "decode_blocks"]

BLOCK = 32
QMAX = (1 << 30) - 1
TASK_BLOCKS = 2048  # 64 Ki elements per parallel task
# Pass 1 keeps up to this many packed words per block of a task (r + 1 per block with r > 0) for pass 2 to
# copy: 6/32 of the input's size as a transient, instead of quantizing every element twice. ReLU activations
# at eb = 1 % of their range average r + 1 ~ 5; a task over the budget is re-quantized in pass 2 as before.
SCRATCH_WORDS_PER_BLOCK = 6
# Bit-plane packing of blocks with r <= 8 (|d| fits a byte): the 32 magnitudes are 32 bytes, i.e. four
# uint64 words of 8 lanes. Gathering bit j of 8 lanes into one byte is ((w >> j) & LSB) * GATHER >> 56;
# spreading a plane byte back into 8 lanes is the inverse trick below (SPREAD_*). 8x fewer operations
# than a lane-by-lane loop.
LSB = np.uint64(0x0101010101010101)
GATHER = np.uint64(0x0102040810204080)
SPREAD_MASK = np.uint64(0x8040201008040201)
SPREAD_ADD = np.uint64(0x7F7F7F7F7F7F7F7F)
HIGH = np.uint64(0x8080808080808080)


_RINT_MAGIC = 6755399441055744.0  # 1.5 * 2**52


@njit(inline="always", cache=True)
def _rint(v):  # noqa: ANN001, ANN202
    """np.rint (ties to even) for |v| < 2**51 by the float64 magic-number addition, which vectorises where
    a libm call does not; larger |v| (and NaN / Inf) come out with |result| > QMAX or NaN / Inf, so they
    are outliers under both, with q = 0."""
    return (v + _RINT_MAGIC) - _RINT_MAGIC


@njit(inline="always", cache=True)
def _block_q(xb, recip, twoeb, eb, q):  # noqa: ANN001, ANN202
    """q[0:32] (int32) of the block ``xb`` (a slice of at most 32 lanes; the rest are 0), as sz._quantize_cpu
    computes them (NaN / Inf / |q| > QMAX: q = 0 and an outlier); returns (rate, outlier lane bits).
    Fixed-trip, branch-free loops over the 32 lanes of a slice (indices from 0: no negative-index wraparound
    check in the loop), so LLVM vectorises them."""
    obits = np.uint32(0)
    lanes = xb.size
    if lanes == BLOCK:  # full block: no lane tests in the vectorised loops
        for k in range(BLOCK):
            xd = np.float64(xb[k])
            qf = _rint(xd * recip)
            qf = qf if np.abs(qf) <= QMAX else 0.0
            err = np.abs(xd - np.float64(np.float32(qf * twoeb)))
            q[k] = np.int32(qf)
            obits |= (np.uint32(1) - np.uint32(err <= eb)) << np.uint32(k)  # NaN error: an outlier too
        m = np.abs(q[0])
        for k in range(1, BLOCK):
            m = max(m, np.abs(q[k] - q[k - 1]))
    else:
        for k in range(BLOCK):
            q[k] = 0
        for k in range(lanes):
            xd = np.float64(xb[k])
            qf = _rint(xd * recip)
            qf = qf if np.abs(qf) <= QMAX else 0.0
            err = np.abs(xd - np.float64(np.float32(qf * twoeb)))
            q[k] = np.int32(qf)
            obits |= (np.uint32(1) - np.uint32(err <= eb)) << np.uint32(k)
        m = np.abs(q[0])
        for k in range(1, lanes):
            m = max(m, np.abs(q[k] - q[k - 1]))
    r = 32 - np.int64(_clz(np.uint32(m))) if m != 0 else 0  # bit length, no loop per bit
    return r, obits


@njit(inline="always", cache=True)
def _block_q_only(xb, recip, q):  # noqa: ANN001, ANN202
    """q[0:32] as ``_block_q`` computes them, without the error check (pass 2 has the outlier bits already)."""
    lanes = xb.size
    if lanes < BLOCK:
        for k in range(BLOCK):
            q[k] = 0
    for k in range(lanes):
        qf = _rint(np.float64(xb[k]) * recip)
        q[k] = np.int32(qf if np.abs(qf) <= QMAX else 0.0)


@njit(inline="always", cache=True)
def _pack_block(q, lanes, r, mag, out, w):  # noqa: ANN001, ANN202
    """Write the block of quantized values q[0:32] (``lanes`` valid) at out[w:w+r+1]: sign plane, then r
    magnitude planes of its deltas (padding lanes: delta 0)."""
    sign = np.uint32(q[0] < 0)
    mag[0] = np.uint32(np.abs(q[0]))
    for k in range(1, BLOCK):  # no lane test on the full blocks: this loop vectorises
        d = q[k] - q[k - 1]
        sign |= np.uint32(d < 0) << np.uint32(k)
        mag[k] = np.uint32(np.abs(d))
    if lanes < BLOCK:  # the last block: padding deltas are 0, not -q[last]
        for k in range(lanes, BLOCK):
            sign &= ~(np.uint32(1) << np.uint32(k))
            mag[k] = 0
    out[w] = sign
    if r <= 8:
        # the 32 low bytes as four uint64 of 8 lanes, built in registers (bytes stored one by one and read
        # back as a word would stall store forwarding)
        m0 = np.uint64(0)
        m1 = np.uint64(0)
        m2 = np.uint64(0)
        m3 = np.uint64(0)
        for k in range(8):
            sh = np.uint64(8 * k)
            m0 |= np.uint64(mag[k] & np.uint32(0xFF)) << sh
            m1 |= np.uint64(mag[8 + k] & np.uint32(0xFF)) << sh
            m2 |= np.uint64(mag[16 + k] & np.uint32(0xFF)) << sh
            m3 |= np.uint64(mag[24 + k] & np.uint32(0xFF)) << sh
        for j in range(r):
            sj = np.uint64(j)
            plane = ((((m0 >> sj) & LSB) * GATHER) >> np.uint64(56)) \
                | (((((m1 >> sj) & LSB) * GATHER) >> np.uint64(56)) << np.uint64(8)) \
                | (((((m2 >> sj) & LSB) * GATHER) >> np.uint64(56)) << np.uint64(16)) \
                | (((((m3 >> sj) & LSB) * GATHER) >> np.uint64(56)) << np.uint64(24))
            out[w + 1 + j] = np.uint32(plane)
    else:
        for j in range(r):
            plane = np.uint32(0)
            for k in range(BLOCK):
                plane |= ((mag[k] >> np.uint32(j)) & np.uint32(1)) << np.uint32(k)
            out[w + 1 + j] = plane


@njit(parallel=True, cache=True, nogil=True)
def _encode_rates(x, recip, twoeb, eb, rates, outlier_bits, task_words, task_outliers, scratch, cap):  # noqa: ANN001, ANN202
    """Pass 1: rates, outlier bits, per-task word and outlier counts; a task's packed words go to its ``cap``
    words of ``scratch`` while they fit (pass 2 then copies them instead of quantizing again)."""
    nb = rates.size
    for t in prange(task_words.size):
        q = np.empty(BLOCK, dtype=np.int32)
        mag = np.empty(BLOCK, dtype=np.uint32)
        sc = scratch[t * cap:(t + 1) * cap]
        words = 0
        outs = 0
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            xb = x[i0:i0 + BLOCK]
            r, ob = _block_q(xb, recip, twoeb, eb, q)
            rates[b] = r
            outlier_bits[b] = ob
            if r > 0:
                if words + r + 1 <= cap:  # once over, the task stays over: pass 2 redoes it whole
                    _pack_block(q, xb.size, r, mag, sc, words)
                words += r + 1
            outs += np.int64(_popcount(ob))
        task_words[t] = words
        task_outliers[t] = outs


@njit(parallel=True, cache=True, nogil=True)
def _encode_pack(x, recip, rates, outlier_bits, word_start, outlier_start, data, idx, scratch, cap):  # noqa: ANN001, ANN202
    """Pass 2: outlier indices, and each task's words at its offset: copied from ``scratch``, or re-quantized
    and packed for a task whose words did not fit there."""
    nb = rates.size
    for t in prange(word_start.size - 1):
        q = np.empty(BLOCK, dtype=np.int32)
        mag = np.empty(BLOCK, dtype=np.uint32)
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
        count = word_start[t + 1] - w
        if count <= cap:
            dst = data[w:w + count]
            src = scratch[t * cap:t * cap + count]
            for i in range(count):
                dst[i] = src[i]
            continue
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            r = np.int64(rates[b])
            if r == 0:
                continue
            i0 = b * BLOCK
            xb = x[i0:i0 + BLOCK]
            _block_q_only(xb, recip, q)
            _pack_block(q, xb.size, r, mag, data, w)
            w += r + 1


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


@njit(inline="always", cache=True)
def _spread(v):  # noqa: ANN001, ANN202
    """The 8 bits of byte ``v`` as 8 byte lanes of 0 / 1 (lane l = bit l)."""
    return ((((v * LSB) & SPREAD_MASK) + SPREAD_ADD) & HIGH) >> np.uint64(7)


@njit(parallel=True, cache=True, nogil=True)
def _decode(rates, data, word_start, twoeb, y):  # noqa: ANN001, ANN202
    n = y.size
    nb = rates.size
    for t in prange(word_start.size - 1):
        mag = np.empty(BLOCK, dtype=np.int32)
        w = word_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            r = np.int64(rates[b])
            yb = y[i0:i0 + BLOCK]
            if r == 0:
                for k in range(yb.size):
                    yb[k] = 0.0
                continue
            if r <= 8:  # four uint64 of 8 byte lanes, kept in registers
                m0 = np.uint64(0)
                m1 = np.uint64(0)
                m2 = np.uint64(0)
                m3 = np.uint64(0)
                for j in range(r):
                    p = np.uint64(data[w + 1 + j])
                    sj = np.uint64(j)
                    m0 |= _spread(p & np.uint64(0xFF)) << sj
                    m1 |= _spread((p >> np.uint64(8)) & np.uint64(0xFF)) << sj
                    m2 |= _spread((p >> np.uint64(16)) & np.uint64(0xFF)) << sj
                    m3 |= _spread((p >> np.uint64(24)) & np.uint64(0xFF)) << sj
                for k in range(8):
                    sh = np.uint64(8 * k)
                    mag[k] = np.int32((m0 >> sh) & np.uint64(0xFF))
                    mag[8 + k] = np.int32((m1 >> sh) & np.uint64(0xFF))
                    mag[16 + k] = np.int32((m2 >> sh) & np.uint64(0xFF))
                    mag[24 + k] = np.int32((m3 >> sh) & np.uint64(0xFF))
            else:
                for k in range(BLOCK):
                    mag[k] = 0
                for j in range(r):
                    p = data[w + 1 + j]
                    for k in range(BLOCK):
                        mag[k] |= np.int32((p >> np.uint32(k)) & np.uint32(1)) << np.int32(j)
            sign = data[w]
            for k in range(BLOCK):
                s = -np.int32((sign >> np.uint32(k)) & np.uint32(1))  # 0 or -1
                mag[k] = (mag[k] ^ s) - s
            acc = np.int32(0)
            for k in range(BLOCK):  # the serial prefix sum apart, so the conversion loop below vectorises
                acc += mag[k]
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
    _encode_rates(flat, recip, twoeb, eb, rates, outlier_bits, task_words, task_outliers, scratch, cap)
    word_start = _prefix(task_words)
    outlier_start = _prefix(task_outliers)
    data = np.empty(int(word_start[-1]), dtype=np.uint32)
    idx = np.empty(int(outlier_start[-1]), dtype=np.int64)
    _encode_pack(flat, recip, rates, outlier_bits, word_start, outlier_start, data, idx, scratch, cap)
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
