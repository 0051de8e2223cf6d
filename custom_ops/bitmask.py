"""``bitmask``: a boolean tensor (a Dropout mask) held as one bit per element, decoded to the same booleans.

ORT's training Dropout stashes its keep-mask as one byte per element for DropoutGrad(dY, mask, ratio); the
bits are the mask exactly, so DropoutGrad's result is bit-identical. Same payload layout and GPU decoder as
``relumask`` (``np.packbits`` little bit order, element i in bit i % 8 of byte i // 8; ``shape`` int64[ndim]);
only the encoder differs: it packs the booleans as they are instead of testing x > 0 on floats, so no
float copy of the mask is ever made.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Payload, register
from .relumask import ReluMask


@register
class BitMask(ReluMask):
    name = "bitmask"
    input_dtype = "bool"
    output_dtype = "bool"
    lossless = True

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        shapes = [(1,), (7,), (3, 5, 7), (2, 3, 17, 9), (0, 4), (4, 64, 64)]
        cases = [rng.random(s) < 0.9 for s in shapes] + [np.zeros((9,), bool), np.ones((33,), bool)]
        return [(c, {}) for c in cases]

    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        x = np.asarray(x, dtype=np.bool_)
        return np.packbits(x.reshape(-1), bitorder="little"), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)

    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        from . import gpu

        x = cp.ascontiguousarray(x, dtype=cp.bool_)
        return cp.packbits(x.reshape(-1), bitorder="little"), gpu.shape_array(x.shape)
