"""Compiled kernel for ``maxpool_index`` encoding (layout in ``custom_ops/maxpool_index.py``).

Only the table lookup of the NumPy fast path runs here: each int64 index minus its window's tap-0 index (+ 1) is
clamped to the lookup table ``maxpool_index._Tables.lut`` and mapped to its window offset, in one pass without
the NumPy path's int64 temporaries (``np.clip`` semantics of ``np.take(..., mode="clip")``, int64 arithmetic
wrapping as NumPy's: the same offsets). The checks and the b-bit packing stay in NumPy (``_encode_lut``).
Decoding stays in NumPy: its table path is faster than ``cpu/bits.py``'s compiled decoder.
"""
from __future__ import annotations

import numpy as np

from ._jit import njit, prange  # numba's, or AOT-bound stand-ins (cpu/aot.py)

__all__ = ["window_offsets"]

# Signature of the ahead-of-time compiled copy (cpu/aot.py; the types window_offsets passes).
AOT_SIGNATURES = {"_window_offsets": "void(i8[:, ::1], u1[::1], i8, i8[::1], u1[::1], i8, i8[::1])"}

ELEMENTS = 1 << 15  # about this many offsets per parallel task (whole planes)


@njit(parallel=True, cache=True, nogil=True)
def _window_offsets(idx, k, hw, origin1, lut, rows, kmax):  # noqa: ANN001, ANN202  (typed by their arguments)
    """k[r*ohw + pos] = lut[clamp(idx[r, pos] - r*hw - origin1[pos], 0, lut.size - 1)]; kmax[task] = the
    task's largest offset. Tasks are ``rows`` planes; the inner loop runs over one plane's slice (from 0)."""
    P = idx.shape[0]
    ohw = idx.shape[1]
    last = np.int64(lut.size - 1)
    for t in prange((P + rows - 1) // rows):
        m = 0
        for r in range(t * rows, min(P, (t + 1) * rows)):
            row = idx[r]
            kr = k[r * ohw:(r + 1) * ohw]
            off = r * hw
            for pos in range(ohw):
                d = row[pos] - off - origin1[pos]
                kr[pos] = lut[min(max(d, 0), last)]
            for pos in range(ohw):
                m = max(m, np.int64(kr[pos]))
        kmax[t] = m


def window_offsets(idx: np.ndarray, k: np.ndarray, hw: int, origin1: np.ndarray, lut: np.ndarray) -> int:
    """Write the window offsets of the int64 indices ``idx`` (planes, OH*OW) into ``k`` (uint8, at least
    planes*OH*OW long); ``origin1[pos]`` = tap-0 flat index of position pos in plane 0, minus 1. Returns the
    largest offset written (INVALID = 255 where a distance is no tap)."""
    P, ohw = idx.shape
    if P * ohw == 0:
        return 0
    rows = max(1, ELEMENTS // max(ohw, 1))
    kmax = np.zeros(-(-P // rows), dtype=np.int64)
    _window_offsets(np.ascontiguousarray(idx, dtype=np.int64), k, np.int64(hw), origin1, lut, np.int64(rows), kmax)
    return int(kmax.max())
