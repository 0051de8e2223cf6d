"""Pick the smallest lossless sparse representation of a float32 tensor from its measured density.

Sizes come from the codecs' exact ``predicted_nbytes`` formulas, so the choice is exact for a given
nonzero count. With n elements, density d and ndim dims (ignoring the tiny shape/rounding terms):

    dense  4n
    zvc    n/8 + 4dn                 < dense  for d < 31/32 (~96.9%)
    csr    5dn + 4(n/256 + 1)        < zvc    for d < 7/64  (~10.9%);  < dense for d < ~79.7%

"dense" means "store the tensor unencoded"; it wins ties, so an encoding is chosen only when it is
strictly smaller.
"""
from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .base import get_codec, is_cupy_array
from . import sparse as _sparse  # noqa: F401  (registers "zvc" and "csr")

SparseChoice = Literal["zvc", "csr", "dense"]
SPARSE_CODECS: tuple[str, ...] = ("zvc", "csr")


def count_nonzero(x: Any) -> int:
    """Bitwise nonzero count of a float32 array (NumPy or CuPy): -0.0 and NaN count as nonzero."""
    if x.dtype != np.float32:
        raise TypeError(f"expected float32, got {x.dtype}")
    if is_cupy_array(x):
        import cupy as cp

        return int(cp.count_nonzero(cp.ascontiguousarray(x).view(cp.uint32)))
    return int(np.count_nonzero(np.ascontiguousarray(x).view(np.uint32)))


def measure_density(x: Any) -> float:
    """Fraction of elements whose bit pattern is not +0.0 (0.0 for an empty tensor)."""
    return count_nonzero(x) / x.size if x.size else 0.0


def predicted_sizes(shape: tuple[int, ...], **stats: Any) -> dict[str, int]:
    """Payload bytes of each option for ``density=`` or ``nnz=``; "dense" is the raw float32 size."""
    shape = tuple(int(d) for d in shape)
    sizes = {"dense": 4 * (int(np.prod(shape, dtype=np.int64)) if shape else 1)}
    for name in SPARSE_CODECS:
        sizes[name] = get_codec(name).predicted_nbytes(shape, **stats)
    return sizes


def choose_sparse_codec(
    x: Any = None, *, shape: tuple[int, ...] | None = None, density: float | None = None,
    nnz: int | None = None,
) -> SparseChoice:
    """Smallest of "zvc" / "csr" / "dense" for a tensor ``x``, or for ``shape`` plus ``density`` or ``nnz``.

    Never returns an encoding whose payload is not strictly smaller than dense. Ties between the two
    encodings go to ZVC, whose kernels do less work.
    """
    if x is not None:
        shape, stats = tuple(x.shape), {"nnz": count_nonzero(x)}
    elif shape is None:
        raise TypeError("choose_sparse_codec needs a tensor or shape=")
    elif nnz is not None:
        stats = {"nnz": nnz}
    elif density is not None:
        stats = {"density": density}
    else:
        raise TypeError("choose_sparse_codec needs density= or nnz= with shape=")
    sizes = predicted_sizes(shape, **stats)
    best: SparseChoice = "dense"
    for name in SPARSE_CODECS:  # strict '<' keeps dense on ties and ZVC over CSR on ties
        if sizes[name] < sizes[best]:
            best = name  # type: ignore[assignment]
    return best
