"""``intervalmask``: one bit per element, "is x inside the closed interval [lo, hi]", decoded to booleans.

What ORT's Clip gradient reads of the Clip input X: ``Cast(And(GreaterOrEqual(X, min), LessOrEqual(X, max)),
float) * dY`` (gradient_builder.cc, GetClipGradient). So ReLU6 = Clip(X, 0, 6), and HardSigmoid / HardSwish
written with it (``relu6(x + 3) / 6``, the only form ORT 1.19 can differentiate), need only that predicate
of X: the bits decode to the very booleans ``And`` made, and the gradient is bit-identical
(passes/interval_mask.py does the rewrite). A missing bound is ``lo = -inf`` / ``hi = +inf``.

IEEE comparisons, as ORT's: NaN -> 0; -0.0 equals +0.0; subnormals are compared as they are (numpy and numba
do not flush them; the CUDA kernel compares bit patterns, so no flush-to-zero mode changes a bit).

Payload as ``signbits`` / ``relumask``: ``bits`` uint8[ceil(n/8)], element i in bit (i % 8) of byte i // 8
(``np.packbits`` little bit order, unused high bits of the last byte 0); ``shape`` int64[ndim]. The decoder
is relumask's (bits -> bool).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import cpu, gpu
from .base import Payload, register
from .relumask import ReluMask


def _bound(params: dict[str, Any], key: str) -> np.float32:
    value = params.get(key)
    if value is None:
        raise ValueError(f"intervalmask: param {key!r} (a float bound, ±inf for none) is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"intervalmask: {key}={value!r} is not a number")
    if math.isnan(float(value)):
        raise ValueError(f"intervalmask: {key} is NaN; a Clip bound must be a number or ±inf")
    bound = np.float32(value)
    if float(bound) != float(value):
        raise ValueError(f"intervalmask: {key}={value!r} is not a float32 value; the comparison would "
                         "differ from the graph's")
    return bound


@register
class IntervalMask(ReluMask):
    name = "intervalmask"
    input_dtype = "float32"
    output_dtype = "bool"
    lossless = True  # exact for the Clip gradient, which reads only the predicate
    kernel_file = "intervalmask.cu"

    def validate_params(self, **params: Any) -> None:
        _bound(params, "lo")
        _bound(params, "hi")

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 6.0, 6.0000005,
                            5.9999995, 3.0, -3.0], dtype=np.float32)
        relu6 = {"lo": 0.0, "hi": 6.0}
        cases = [(3 * rng.standard_normal(s).astype(np.float32), relu6)
                 for s in [(1,), (7,), (3, 5, 7), (2, 3, 17, 9), (0, 4)]]
        cases += [(special, relu6), (special, {"lo": -1.0, "hi": 1.0}), (special, {"lo": 0.0, "hi": math.inf}),
                  (special, {"lo": -math.inf, "hi": 6.0}), (np.ones((33,), np.float32), relu6),
                  (np.float32(2.5).reshape(()), relu6)]
        return cases

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        lo, hi = _bound(params, "lo"), _bound(params, "hi")
        x = np.asarray(x, dtype=np.float32)
        shape = np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        if (k := cpu.kernels("intervalmask")) is not None:
            return k.intervalmask_encode(x, lo, hi), shape
        inside = np.logical_and(np.greater_equal(x, lo), np.less_equal(x, hi))
        return np.packbits(inside.reshape(-1), bitorder="little"), shape

    # decode_cpu / decode_gpu: relumask's (bits -> bool)

    # -- CuPy -------------------------------------------------------------------------------------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        lo, hi = _bound(params, "lo"), _bound(params, "hi")
        shape = tuple(x.shape)
        x = cp.ascontiguousarray(x, dtype=cp.float32)
        n = int(x.size)
        nbytes = (n + 7) // 8
        bits = cp.empty(nbytes, dtype=cp.uint8)
        gpu.launch("intervalmask.cu", "intervalmask_encode", nbytes,
                   (x, bits, gpu.i64(n), gpu.i64(nbytes), lo, hi))
        return bits, gpu.shape_array(shape)
