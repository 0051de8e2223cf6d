"""Compiled kernels for the bit-packing codecs: ``signbits`` / ``relumask`` and ``maxpool_index``.

Bitstreams as in ``kernels/signbits.cu`` and ``kernels/maxpool_index.cu``: a little-endian bit stream (stream
bit t = bit t % 8 of byte t // 8), element e in bits [e*b, (e+1)*b), unused bits of the last byte 0. Work is
split into chunks of ``CHUNK`` elements (a multiple of 8, so every chunk starts on a byte boundary and each
byte is written by one thread).
"""
from __future__ import annotations

import numpy as np
from ._jit import njit, prange  # numba's, or AOT-bound stand-ins (cpu/aot.py)

__all__ = ["signbits_encode", "signbits_decode", "maxpool_encode", "maxpool_decode"]

# Signatures of the ahead-of-time compiled copies (cpu/aot.py; the types the wrappers below pass).
AOT_SIGNATURES = {
    "_signbits_encode": "void(f4[::1], u1[::1])",
    "_bits_decode": ("void(u1[::1], u4[::1], u4[:, ::1])", "void(u1[::1], u1[::1], u1[:, ::1])"),  # float / bool
    "_maxpool_encode": "void(i8[::1], u1[::1], i8, i8[::1], b1[::1], b1[::1], i8[::1])",
    "_maxpool_decode": "void(u1[::1], i8[::1], i8, i8[::1], b1[::1], b1[::1], i8[::1], u1[::1])",
}

CHUNK = 1 << 16  # elements per parallel task


def _nchunks(n: int) -> int:
    return -(-n // CHUNK)


# -- signbits / relumask --------------------------------------------------------------------------------
@njit(parallel=True, cache=True, nogil=True)
def _signbits_encode(x, bits):  # noqa: ANN001, ANN202  (numba kernels: typed by their arguments)
    n = x.size
    nbytes = bits.size
    for c in prange((nbytes * 8 + CHUNK - 1) // CHUNK):
        b0 = c * (CHUNK // 8)
        b1 = min(nbytes, b0 + CHUNK // 8)
        full = min(b1, n // 8)
        for b in range(b0, full):
            i = b * 8
            v = 0
            for j in range(8):
                v |= np.uint32(x[i + j] > 0.0) << j
            bits[b] = v
        for b in range(max(b0, full), b1):  # the last, partial byte
            v = 0
            for j in range(n - b * 8):
                v |= np.uint32(x[b * 8 + j] > 0.0) << j
            bits[b] = v


@njit(parallel=True, cache=True, nogil=True)
def _bits_decode(bits, out, table):  # noqa: ANN001, ANN202
    """out[8b:8b+8] = table[bits[b]] (row v: what the 8 bits of byte v decode to: float 1.0/0.0 as uint32,
    or bool as uint8); a row copy vectorises where per-bit shifts did not."""
    n = out.size
    for c in prange((n + CHUNK - 1) // CHUNK):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        full = i0 + (i1 - i0) // 8 * 8
        for b in range(i0 >> 3, full >> 3):
            row = table[np.int64(bits[b])]
            for j in range(8):
                out[b * 8 + j] = row[j]
        if full < i1:
            row = table[np.int64(bits[full >> 3])]
            for j in range(i1 - full):
                out[full + j] = row[j]


_FLOAT_ROWS = np.ascontiguousarray(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.float32)
).view(np.uint32)
_BOOL_ROWS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")


def signbits_encode(x: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    bits = np.empty((flat.size + 7) // 8, dtype=np.uint8)
    _signbits_encode(flat, bits)
    return bits


def signbits_decode(bits: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
    """Flat decode of n elements to float32 1.0/0.0 or bool."""
    bits = np.ascontiguousarray(bits, dtype=np.uint8).reshape(-1)
    if np.dtype(dtype) == np.bool_:
        out = np.empty(n, dtype=np.uint8)
        _bits_decode(bits, out, _BOOL_ROWS)
        return out.view(np.bool_)
    out = np.empty(n, dtype=np.uint32)
    _bits_decode(bits, out, _FLOAT_ROWS)
    return out.view(np.float32)


# -- maxpool_index ----------------------------------------------------------------------------------------
@njit(parallel=True, cache=True, nogil=True)
def _maxpool_encode(idx, out, bits, geom, empty_h, empty_w, bad):  # noqa: ANN001, ANN202
    """Window offsets of MaxPool indices, packed ``bits`` wide; bad[c] = 1 + first bad element of chunk c."""
    OH, OW, H, W, KH, KW, SH, SW, PT, PL, DH, DW = (geom[0], geom[1], geom[2], geom[3], geom[4], geom[5],
                                                    geom[6], geom[7], geom[8], geom[9], geom[10], geom[11])
    n = idx.size
    ohw = OH * OW
    hw = H * W
    uW = np.uint64(W)
    span_h = (KH - 1) * DH + 1
    span_w = (KW - 1) * DW + 1
    sentinel = -W - 1
    nchunks = (n + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        e0 = c * CHUNK
        e1 = min(n, e0 + CHUNK)
        plane = e0 // ohw
        r = e0 - plane * ohw
        oh = r // OW
        ow = r - oh * OW
        base = plane * hw
        acc = np.uint64(0)
        nacc = 0
        pos = e0 * bits // 8
        first_bad = -1
        for e in range(e0, e1):
            rel = idx[e] - base
            k = 0
            if empty_h[oh] or empty_w[ow]:
                if rel != sentinel and first_bad < 0:
                    first_bad = e
            elif rel < 0 or rel >= hw:
                if first_bad < 0:
                    first_bad = e
            else:
                h = np.uint64(rel) // uW
                w = np.int64(np.uint64(rel) - h * uW)
                dh = np.int64(h) - (oh * SH - PT)
                dw = w - (ow * SW - PL)
                if dh < 0 or dw < 0 or dh >= span_h or dw >= span_w:
                    if first_bad < 0:
                        first_bad = e
                else:
                    if DH != 1:
                        if dh % DH != 0 and first_bad < 0:
                            first_bad = e
                        dh //= DH
                    if DW != 1:
                        if dw % DW != 0 and first_bad < 0:
                            first_bad = e
                        dw //= DW
                    k = dh * KW + dw
            acc |= np.uint64(k) << np.uint64(nacc)
            nacc += bits
            while nacc >= 8:
                out[pos] = np.uint8(acc & np.uint64(0xFF))
                pos += 1
                acc >>= np.uint64(8)
                nacc -= 8
            ow += 1
            if ow == OW:
                ow = 0
                oh += 1
                if oh == OH:
                    oh = 0
                    plane += 1
                    base += hw
        if nacc > 0:
            out[pos] = np.uint8(acc & np.uint64(0xFF))
        bad[c] = first_bad + 1


@njit(parallel=True, cache=True, nogil=True)
def _maxpool_decode(packed, out, bits, geom, empty_h, empty_w, table, bad):  # noqa: ANN001, ANN202
    """Indices from packed window offsets; ``table[k]`` = offset k's flat distance from the window origin;
    bad[c] = 1 if chunk c holds an offset outside the window."""
    OH, OW, H, W, KH, KW, SH, SW, PT, PL = (geom[0], geom[1], geom[2], geom[3], geom[4], geom[5], geom[6],
                                            geom[7], geom[8], geom[9])
    n = out.size
    ohw = OH * OW
    hw = H * W
    window = KH * KW
    mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
    nchunks = (n + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        e0 = c * CHUNK
        e1 = min(n, e0 + CHUNK)
        plane = e0 // ohw
        r = e0 - plane * ohw
        oh = r // OW
        ow = r - oh * OW
        base = plane * hw
        acc = np.uint64(0)
        nacc = 0
        pos = e0 * bits // 8
        flag = 0
        for e in range(e0, e1):
            while nacc < bits:
                acc |= np.uint64(packed[pos]) << np.uint64(nacc)
                pos += 1
                nacc += 8
            k = np.int64(acc & mask)
            acc >>= np.uint64(bits)
            nacc -= bits
            if k >= window:
                flag = 1
                k = 0
            if empty_h[oh] or empty_w[ow]:
                out[e] = base - W - 1
            else:
                out[e] = base + (oh * SH - PT) * W + (ow * SW - PL) + table[k]
            ow += 1
            if ow == OW:
                ow = 0
                oh += 1
                if oh == OH:
                    oh = 0
                    plane += 1
                    base += hw
        bad[c] = flag


def _geom_array(g) -> np.ndarray:  # noqa: ANN001  (a maxpool_index.PoolGeometry)
    return np.array([g.OH, g.OW, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.dh, g.dw], dtype=np.int64)


def _empty_axes(g) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    from ..maxpool_index import _taps_empty

    eh = _taps_empty(np.arange(g.OH, dtype=np.int64) * g.sh - g.pt, g.kh, g.dh, g.H)
    ew = _taps_empty(np.arange(g.OW, dtype=np.int64) * g.sw - g.pl, g.kw, g.dw, g.W)
    return eh.astype(np.bool_), ew.astype(np.bool_)


def maxpool_encode(idx: np.ndarray, g) -> tuple[np.ndarray, int]:  # noqa: ANN001
    """(packed offsets, first bad flat position or -1)."""
    flat = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
    n = flat.size
    out = np.empty((n * g.bits + 7) // 8, dtype=np.uint8)
    bad = np.zeros(_nchunks(n), dtype=np.int64)
    eh, ew = _empty_axes(g)
    _maxpool_encode(flat, out, np.int64(g.bits), _geom_array(g), eh, ew, bad)
    hits = bad[bad > 0]
    return out, int(hits[0]) - 1 if hits.size else -1


def maxpool_decode(packed: np.ndarray, g) -> tuple[np.ndarray, bool]:  # noqa: ANN001
    """(flat int64 indices, True if some offset lies outside its window)."""
    n = g.N * g.C * g.OH * g.OW
    packed = np.ascontiguousarray(packed, dtype=np.uint8).reshape(-1)
    window = g.kh * g.kw
    # Offsets past the window are flagged, never looked up, so a table of window entries suffices; a window
    # too big to tabulate (> 2**20 taps, never seen in a CNN) would not fit the bit budget of this path.
    if window > 1 << 20:
        raise ValueError("maxpool_index: pooling window too large for the compiled decoder")
    k = np.arange(window, dtype=np.int64)
    table = (k // g.kw) * g.dh * g.W + (k % g.kw) * g.dw
    out = np.empty(n, dtype=np.int64)
    bad = np.zeros(_nchunks(n), dtype=np.uint8)
    eh, ew = _empty_axes(g)
    _maxpool_decode(packed, out, np.int64(g.bits), _geom_array(g), eh, ew, table, bad)
    return out, bool(bad.any())
