"""Gist's Binarize for ReLU: keep one bit per element, "was it positive".

ReluGrad(dY, X) only tests ``X > 0`` (ORT returns +0 elsewhere, whatever dY is), and ``Y = Relu(X)``
satisfies ``Y > 0 <=> X > 0``; so decoding to 1.0/0.0 yields bit-identical gradients whether the ReLU input
or output was encoded. Comparisons use IEEE semantics: NaN -> 0, -0.0 -> 0, +Inf -> 1.

Payload: ``bits`` uint8[ceil(n/8)], element i in bit (i % 8) of byte i // 8 (``np.packbits`` little bit
order, unused high bits of the last byte 0); ``shape`` int64[ndim].
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import cpu, gpu
from .base import Codec, Payload, register

# Row v = the 8 floats byte v decodes to; a gather from it beats unpackbits + astype.
_DECODE_LUT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.float32)


@register
class SignBits(Codec):
    name = "signbits"
    lossless = True  # lossless for ReluGrad, which needs only the sign test
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("bits", "shape")
    payload_dtypes = ("uint8", "int64")
    kernel_file = "signbits.cu"
    # What a set bit decodes to: a row of 8 values per byte (CPU) and the kernel writing it (GPU).
    _lut = _DECODE_LUT
    _decode_kernel = ("signbits.cu", "signbits_decode", "float32")

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        n = int(np.prod(shape, dtype=np.int64))
        return (n + 7) // 8 + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """(tensor, params) cases for generic codec tests: odd sizes, empty, specials."""
        cases = [rng.standard_normal(s).astype(np.float32) for s in [(1,), (7,), (3, 5, 7), (2, 3, 17, 9), (0, 4)]]
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.0], dtype=np.float32)
        cases += [special, np.zeros((4, 9), np.float32), np.ones((33,), np.float32), np.float32(2.5).reshape(())]
        return [(c, {}) for c in cases]

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        x = np.asarray(x, dtype=np.float32)
        if (k := cpu.kernels("bits")) is not None:
            return k.signbits_encode(x), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        bits = np.packbits(np.greater(x, 0.0).reshape(-1), bitorder="little")
        return bits, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        bits, shape_arr = payload
        shape = tuple(int(d) for d in np.asarray(shape_arr).reshape(-1))
        n = int(np.prod(shape, dtype=np.int64))
        bits = np.asarray(bits, dtype=np.uint8).reshape(-1)
        if bits.size != (n + 7) // 8:
            raise ValueError(f"{self.name}: {bits.size} bytes cannot hold shape {shape}")
        if (k := cpu.kernels("bits")) is not None:
            return k.signbits_decode(bits, n, self._lut.dtype).reshape(shape)
        return np.take(self._lut, bits, axis=0).reshape(-1)[:n].reshape(shape)

    # -- CuPy -------------------------------------------------------------------------------------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        shape = tuple(x.shape)  # before ascontiguousarray, which makes a 0-d array 1-d in CuPy
        x = cp.ascontiguousarray(x, dtype=cp.float32)
        n = int(x.size)
        nbytes = (n + 7) // 8
        bits = cp.empty(nbytes, dtype=cp.uint8)
        gpu.launch("signbits.cu", "signbits_encode", nbytes, (x, bits, gpu.i64(n), gpu.i64(nbytes)))
        return bits, gpu.shape_array(shape)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        bits, shape_arr = payload
        shape = gpu.host_shape(shape_arr)
        n = int(np.prod(shape, dtype=np.int64))
        bits = cp.ascontiguousarray(bits, dtype=cp.uint8).reshape(-1)
        if bits.size != (n + 7) // 8:
            raise ValueError(f"{self.name}: {bits.size} bytes cannot hold shape {shape}")
        kernel_file, kernel, dtype = self._decode_kernel
        y = cp.empty(n, dtype=cp.uint8 if dtype == "bool" else dtype)
        gpu.launch(kernel_file, kernel, -(-n // 256) * 32, (bits, y, gpu.i64(n)))  # a warp per 32 bytes
        return (y.view(cp.bool_) if dtype == "bool" else y).reshape(shape)
