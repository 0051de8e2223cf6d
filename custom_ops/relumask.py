"""``relumask``: Gist's Binarize with a boolean decode, for ReluGrad rewritten as ``Where(mask, dY, 0)``.

Same payload and encoder as ``signbits`` (one bit per element, ``x > 0``); decode returns a bool array
(one byte per element) instead of float32 1.0/0.0, so the tensor held while the gradient is formed is a
quarter of the size. ``Where(mask, dY, 0)`` equals ReluGrad(dY, X) bit for bit: dY where X > 0, +0 elsewhere
whatever dY is.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import gpu
from .base import Payload, register
from .signbits import SignBits

_MASK_LUT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.bool_)


@register
class ReluMask(SignBits):
    name = "relumask"
    output_dtype = "bool"
    kernel_file = "relumask.cu"

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        bits, shape_arr = payload
        shape = tuple(int(d) for d in np.asarray(shape_arr).reshape(-1))
        n = int(np.prod(shape, dtype=np.int64))
        bits = np.asarray(bits, dtype=np.uint8).reshape(-1)
        if bits.size != (n + 7) // 8:
            raise ValueError(f"relumask: {bits.size} bytes cannot hold shape {shape}")
        return np.take(_MASK_LUT, bits, axis=0).reshape(-1)[:n].reshape(shape)

    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        x = cp.ascontiguousarray(x, dtype=cp.float32)
        n = int(x.size)
        nbytes = (n + 7) // 8
        bits = cp.empty(nbytes, dtype=cp.uint8)
        gpu.launch(SignBits.kernel_file, "signbits_encode", nbytes, (x, bits, gpu.i64(n), gpu.i64(nbytes)))
        return bits, gpu.shape_array(x.shape)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        bits, shape_arr = payload
        shape = gpu.host_shape(shape_arr)
        n = int(np.prod(shape, dtype=np.int64))
        bits = cp.ascontiguousarray(bits, dtype=cp.uint8).reshape(-1)
        if bits.size != (n + 7) // 8:
            raise ValueError(f"relumask: {bits.size} bytes cannot hold shape {shape}")
        mask = cp.empty(n, dtype=cp.uint8)
        gpu.launch(self.kernel_file, "relumask_decode", n, (bits, mask, gpu.i64(n)))
        return mask.view(cp.bool_).reshape(shape)
