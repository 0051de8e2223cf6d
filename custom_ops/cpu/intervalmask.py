"""Compiled encoder of the ``intervalmask`` codec: bit i = lo <= x[i] <= hi, packed as ``signbits``'s stream
(bit i % 8 of byte i // 8, unused bits of the last byte 0). Chunks of ``CHUNK`` elements (a multiple of 8)
start on byte boundaries, so each byte is written by one thread. Decoding is relumask's (``bits.py``)."""
from __future__ import annotations

import numpy as np
from ._jit import njit, prange  # numba's, or AOT-bound stand-ins (cpu/aot.py)

__all__ = ["intervalmask_encode"]

# Signature of the ahead-of-time compiled copy (cpu/aot.py; the types intervalmask_encode passes).
AOT_SIGNATURES = {"_encode": "void(f4[::1], u1[::1], f4, f4)"}

CHUNK = 1 << 16


@njit(parallel=True, cache=True, nogil=True)
def _encode(x, bits, lo, hi):  # noqa: ANN001, ANN202  (numba kernel: typed by its arguments)
    n = x.size
    nbytes = bits.size
    for c in prange((nbytes * 8 + CHUNK - 1) // CHUNK):
        b0 = c * (CHUNK // 8)
        b1 = min(nbytes, b0 + CHUNK // 8)
        for b in range(b0, b1):
            i = b * 8
            m = min(8, n - i)
            v = 0
            for j in range(m):
                xv = x[i + j]
                v |= np.uint32((xv >= lo) & (xv <= hi)) << j
            bits[b] = v


def intervalmask_encode(x: np.ndarray, lo: np.float32, hi: np.float32) -> np.ndarray:
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    bits = np.empty((flat.size + 7) // 8, dtype=np.uint8)
    _encode(flat, bits, np.float32(lo), np.float32(hi))
    return bits
