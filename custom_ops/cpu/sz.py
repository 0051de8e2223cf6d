"""Compiled kernels for the ``sz`` codec's block stage (bitstream in ``custom_ops/sz.py`` / ``kernels/sz.cu``).

Encode is two parallel passes over tasks of ``TASK_BLOCKS`` 32-element blocks, like the CUDA kernels'
rates/pack split: pass 1 quantizes, takes each block's bit width and marks outliers (one bit per element);
after prefix sums over the tasks, pass 2 re-quantizes only the blocks with r > 0 and writes their sign and
magnitude planes at their word offset, and writes the outliers' flat indices. Re-quantizing rather than
keeping q costs some arithmetic but no n-sized temporary next to the activation being shrunk. The float64
operations are those of ``_quantize_cpu`` (no FMA contraction: numba compiles without fast-math).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["encode_blocks", "decode_blocks"]

BLOCK = 32
QMAX = (1 << 30) - 1
TASK_BLOCKS = 2048  # 64 Ki elements per parallel task
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
def _block_q(x, i0, lanes, recip, twoeb, eb, q):  # noqa: ANN001, ANN202
    """q[0:32] (int32) of the block starting at i0 (lanes valid, the rest 0), as sz._quantize_cpu computes
    them (NaN / Inf / |q| > QMAX: q = 0 and an outlier); returns (rate, outlier lane bits). Fixed-trip,
    branch-free loops over the 32 lanes, so LLVM vectorises them."""
    obits = np.uint32(0)
    if lanes == BLOCK:  # full block: no lane tests in the vectorised loops
        for k in range(BLOCK):
            xd = np.float64(x[i0 + k])
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
            xd = np.float64(x[i0 + k])
            qf = _rint(xd * recip)
            qf = qf if np.abs(qf) <= QMAX else 0.0
            err = np.abs(xd - np.float64(np.float32(qf * twoeb)))
            q[k] = np.int32(qf)
            obits |= (np.uint32(1) - np.uint32(err <= eb)) << np.uint32(k)
        m = np.abs(q[0])
        for k in range(1, lanes):
            m = max(m, np.abs(q[k] - q[k - 1]))
    r = 0
    while m >> r:
        r += 1
    return r, obits


@njit(parallel=True, cache=True, nogil=True)
def _encode_rates(x, recip, twoeb, eb, rates, outlier_bits, task_words, task_outliers):  # noqa: ANN001, ANN202
    n = x.size
    nb = rates.size
    for t in prange(task_words.size):
        q = np.empty(BLOCK, dtype=np.int32)
        words = 0
        outs = 0
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            r, ob = _block_q(x, i0, min(BLOCK, n - i0), recip, twoeb, eb, q)
            rates[b] = r
            outlier_bits[b] = ob
            if r > 0:
                words += r + 1
            v = np.int64(ob)
            while v:  # popcount
                v &= v - 1
                outs += 1
        task_words[t] = words
        task_outliers[t] = outs


@njit(parallel=True, cache=True, nogil=True)
def _encode_pack(x, recip, twoeb, eb, rates, outlier_bits, word_start, outlier_start, data, idx):  # noqa: ANN001, ANN202
    n = x.size
    nb = rates.size
    for t in prange(word_start.size - 1):
        q = np.empty(BLOCK, dtype=np.int32)
        mag = np.empty(BLOCK, dtype=np.uint32)
        mag8 = np.empty(BLOCK, dtype=np.uint8)
        mag64 = mag8.view(np.uint64)
        w = word_start[t]
        o = outlier_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            ob = outlier_bits[b]
            k = 0
            while ob:
                if ob & np.uint32(1):
                    idx[o] = i0 + k
                    o += 1
                ob >>= np.uint32(1)
                k += 1
            r = np.int64(rates[b])
            if r == 0:
                continue
            _block_q(x, i0, min(BLOCK, n - i0), recip, twoeb, eb, q)  # padding lanes are q = 0 ...
            sign = np.uint32(0)
            for k in range(BLOCK):
                d = q[k] - (q[k - 1] if k > 0 else 0)
                d = d if i0 + k < n else 0  # ... but their delta is 0, not -q[last]
                sign |= np.uint32(d < 0) << np.uint32(k)
                mag[k] = np.uint32(np.abs(d))
            data[w] = sign
            if r <= 8:
                for k in range(BLOCK):
                    mag8[k] = mag[k]
                for j in range(r):
                    plane = np.uint64(0)
                    for g in range(4):
                        bits = (mag64[g] >> np.uint64(j)) & LSB
                        plane |= ((bits * GATHER) >> np.uint64(56)) << np.uint64(8 * g)
                    data[w + 1 + j] = plane
            else:
                for j in range(r):
                    plane = np.uint32(0)
                    for k in range(BLOCK):
                        plane |= ((mag[k] >> np.uint32(j)) & np.uint32(1)) << np.uint32(k)
                    data[w + 1 + j] = plane
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


@njit(parallel=True, cache=True, nogil=True)
def _decode(rates, data, word_start, twoeb, y):  # noqa: ANN001, ANN202
    n = y.size
    nb = rates.size
    for t in prange(word_start.size - 1):
        mag = np.empty(BLOCK, dtype=np.int32)
        mag8 = np.empty(BLOCK, dtype=np.uint8)
        mag64 = mag8.view(np.uint64)
        w = word_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            lanes = min(BLOCK, n - i0)
            r = np.int64(rates[b])
            if r == 0:
                for k in range(lanes):
                    y[i0 + k] = 0.0
                continue
            if r <= 8:
                for g in range(4):
                    mag64[g] = np.uint64(0)
                for j in range(r):
                    p = np.uint64(data[w + 1 + j])
                    for g in range(4):
                        v = (p >> np.uint64(8 * g)) & np.uint64(0xFF)
                        lanes8 = ((((v * LSB) & SPREAD_MASK) + SPREAD_ADD) & HIGH) >> np.uint64(7)
                        mag64[g] |= lanes8 << np.uint64(j)
                for k in range(BLOCK):
                    mag[k] = mag8[k]
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
            for k in range(lanes):
                acc += mag[k]
                y[i0 + k] = np.float32(np.float64(acc) * twoeb)
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
    _encode_rates(flat, recip, twoeb, eb, rates, outlier_bits, task_words, task_outliers)
    word_start = _prefix(task_words)
    outlier_start = _prefix(task_outliers)
    data = np.empty(int(word_start[-1]), dtype=np.uint32)
    idx = np.empty(int(outlier_start[-1]), dtype=np.int64)
    _encode_pack(flat, recip, twoeb, eb, rates, outlier_bits, word_start, outlier_start, data, idx)
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
