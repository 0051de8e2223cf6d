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


@njit(inline="always", cache=True)
def _quant(xf, recip, twoeb, eb):  # noqa: ANN001, ANN202
    """(q, outlier) of one float32 element, as sz._quantize_cpu computes them."""
    xd = np.float64(xf)
    qf = np.rint(xd * recip)
    if not (np.abs(qf) <= QMAX):  # NaN / Inf / too large: q = 0 and an outlier
        qf = 0.0
    xh = np.float32(qf * twoeb)
    err = np.abs(xd - np.float64(xh))
    return np.int64(qf), not (err <= eb)


@njit(inline="always", cache=True)
def _block_q(x, i0, lanes, recip, twoeb, eb, q):  # noqa: ANN001, ANN202
    """q[0:32] of the block starting at i0 (lanes valid, the rest 0); returns (rate, outlier lane bits)."""
    obits = np.uint32(0)
    for k in range(lanes):
        qk, out = _quant(x[i0 + k], recip, twoeb, eb)
        q[k] = qk
        obits |= np.uint32(out) << np.uint32(k)
    for k in range(lanes, BLOCK):
        q[k] = 0
    m = np.abs(q[0])
    prev = q[0]
    for k in range(1, lanes):
        d = np.abs(q[k] - prev)
        prev = q[k]
        if d > m:
            m = d
    r = 0
    while m >> r:
        r += 1
    return r, obits


@njit(parallel=True, cache=True, nogil=True)
def _encode_rates(x, recip, twoeb, eb, rates, outlier_bits, task_words, task_outliers):  # noqa: ANN001, ANN202
    n = x.size
    nb = rates.size
    for t in prange(task_words.size):
        q = np.empty(BLOCK, dtype=np.int64)
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
        q = np.empty(BLOCK, dtype=np.int64)
        mag = np.empty(BLOCK, dtype=np.uint32)
        w = word_start[t]
        o = outlier_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            ob = outlier_bits[b]
            while ob:
                k = 0
                while not (ob >> np.uint32(k)) & np.uint32(1):
                    k += 1
                idx[o] = i0 + k
                o += 1
                ob &= ob - np.uint32(1)
            r = np.int64(rates[b])
            if r == 0:
                continue
            lanes = min(BLOCK, n - i0)
            _block_q(x, i0, lanes, recip, twoeb, eb, q)
            sign = np.uint32(0)
            prev = 0
            for k in range(BLOCK):
                d = q[k] - prev if k < lanes else 0
                prev = q[k]
                if d < 0:
                    sign |= np.uint32(1) << np.uint32(k)
                    d = -d
                mag[k] = d
            data[w] = sign
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
        w = word_start[t]
        for b in range(t * TASK_BLOCKS, min(nb, (t + 1) * TASK_BLOCKS)):
            i0 = b * BLOCK
            lanes = min(BLOCK, n - i0)
            r = np.int64(rates[b])
            if r == 0:
                for k in range(lanes):
                    y[i0 + k] = 0.0
                continue
            sign = data[w]
            acc = 0
            for k in range(lanes):
                m = 0
                for j in range(r):
                    m |= np.int64((data[w + 1 + j] >> np.uint32(k)) & np.uint32(1)) << j
                if (sign >> np.uint32(k)) & np.uint32(1):
                    m = -m
                acc += m
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
