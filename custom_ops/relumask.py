"""``relumask``: Gist's Binarize with a boolean decode, for ReluGrad reading ``Cast(mask, float)``.

Same payload and encoder as ``signbits`` (one bit per element, ``x > 0``); decode returns a bool array
(one byte per element) instead of float32 1.0/0.0, so what crosses the PyOp bridge is a quarter of the size.
ReluGrad only tests X > 0, so ReluGrad(dY, Cast(mask, float)) equals ReluGrad(dY, X) bit for bit
(passes/signbits.py does the rewrite).
"""
from __future__ import annotations

import numpy as np

from .base import register
from .signbits import SignBits


@register
class ReluMask(SignBits):
    name = "relumask"
    output_dtype = "bool"
    kernel_file = "relumask.cu"
    _lut = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.bool_)
    _decode_kernel = ("relumask.cu", "relumask_decode", "bool")
