"""Mesa-style 8-bit affine quantisation per channel: x ≈ lo[g] + code · scale[g], code ∈ [0, 255].

Groups (param ``layout``): ``"channels"`` — axis 1 (an NCHW tensor's channel c, over batch and space);
``"rows"`` (the default: any shape) — every axis but the last (each last-axis row of a MatMul input [..., K]). Per group lo = min and
scale = (max − min) / 255, so |decoded − x| ≤ scale / 2 per element, up to float32 rounding of the arithmetic
itself (a few ulps of |x|). Codec ``q8`` keeps lo and scale in float32; ``q8h`` in float16 (stored as uint16
bits: PyOps have no float16 outputs), lo rounded down and scale rounded up so the bound holds for the stored
values.

Non-finite input: a group holding NaN or ±Inf (or a range beyond float32, or for ``q8h`` beyond float16)
decodes entirely to NaN, so a diverged step stays visible as NaN instead of crashing the op. Empty tensors
and groups are fine; a 0-d tensor is one row; ``"channels"`` needs ndim ≥ 2.

Payload: ``codes`` uint8[n] (x's element order), ``lo`` [G], ``scale`` [G], ``shape`` int64[ndim].
Bytes are the same on CPU and GPU by construction: the per-group lo/scale are computed by the same array code
(NumPy or CuPy: exact min/max, IEEE float32 division, the float16 rounding on the bit patterns), and the
per-element arithmetic — t = (x − lo) · inv with inv = 1 / scale, code = rint(t) clamped by fmax/fmin (NaN →
0), decoded lo + code · scale without FMA — is written the same in NumPy and in ``kernels/q8.cu``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import gpu
from .base import Codec, Payload, register

LAYOUTS = ("channels", "rows")


def groups(shape: tuple[int, ...], layout: str) -> tuple[int, int, int]:
    """(A, G, B): the tensor viewed as [A, G, B], group g = every element of [:, g, :]."""
    if layout == "rows":
        if not shape:
            return 1, 1, 1
        return 1, int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])
    if layout == "channels":
        if len(shape) < 2:
            raise ValueError(f"q8 layout 'channels' needs a tensor with a channel axis 1 (ndim >= 2), got shape "
                             f"{tuple(shape)}; use layout 'rows'")
        return int(shape[0]), int(shape[1]), int(np.prod(shape[2:], dtype=np.int64))
    raise ValueError(f"unknown q8 layout {layout!r}; choose one of {', '.join(LAYOUTS)}")


def _fp16_bits_toward(x: Any, xp: Any, down: bool) -> Any:
    """float16 bit patterns (uint16) of float32 ``x`` rounded toward -inf (``down``) or +inf; overflow → ±inf."""
    h = x.astype(xp.float16)
    back = h.astype(xp.float32)
    bits = h.view(xp.uint16).astype(xp.int32)
    if down:   # h > x: one step down — positive: bits-1; ±0: the smallest negative subnormal; negative: bits+1
        step = xp.where(back > 0, bits - 1, xp.where(back == 0, 0x8001, bits + 1))
        bits = xp.where(back > x, step, bits)
    else:      # scale >= 0 only: h < x → bits+1 (0x7bff + 1 is +inf)
        bits = xp.where(back < x, bits + 1, bits)
    return bits.astype(xp.uint16)


def group_meta(v: Any, xp: Any, half: bool) -> tuple[Any, Any, Any, Any]:
    """For ``v`` float32 [A, G, B] (non-empty): (lo, inv) the encoder uses, (lo, scale) as stored — float32
    arrays, or float16 bits (uint16) when ``half``. Bad groups: lo=inv=0 for the encoder, stored lo NaN."""
    f32 = xp.float32
    finite = xp.isfinite(v)
    lo = xp.where(finite, v, f32(np.inf)).min(axis=(0, 2))
    hi = xp.where(finite, v, f32(-np.inf)).max(axis=(0, 2))
    bad = ~finite.all(axis=(0, 2))
    lo, hi = xp.where(bad, f32(0), lo), xp.where(bad, f32(0), hi)
    if half:
        lo_bits = _fp16_bits_toward(lo, xp, down=True)
        lo = lo_bits.view(xp.float16).astype(f32)
    scale = (hi - lo) / f32(255)
    # A subnormal scale has too few bits for 255 steps (or underflows to 0): such tiny ranges get the smallest
    # normal; for float16 storage it then rounds up to float16's smallest step, so the bound still holds.
    scale = xp.where(hi > lo, xp.maximum(scale, f32(np.finfo(np.float32).tiny)), scale)
    if half:
        scale_bits = _fp16_bits_toward(scale, xp, down=False)
        scale = scale_bits.view(xp.float16).astype(f32)
    bad |= ~(xp.isfinite(lo) & xp.isfinite(scale))
    lo, scale = xp.where(bad, f32(0), lo), xp.where(bad, f32(0), scale)
    inv = xp.where(scale > 0, f32(1) / xp.where(scale > 0, scale, f32(1)), f32(0))
    stored_lo = xp.where(bad, f32(np.nan), lo)
    if half:
        return lo, inv, stored_lo.astype(xp.float16).view(xp.uint16), scale.astype(xp.float16).view(xp.uint16)
    return lo, inv, stored_lo, scale


@register
class Q8(Codec):
    name = "q8"
    lossless = False
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("codes", "lo", "scale", "shape")
    payload_dtypes = ("uint8", "float32", "float32", "int64")
    kernel_file = "q8.cu"
    half = False

    def validate_params(self, layout: str = "rows", **params: Any) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"unknown q8 layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
        if params:
            raise ValueError(f"{self.name} takes only 'layout', got {sorted(params)}")

    def predicted_nbytes(self, shape: tuple[int, ...], layout: str = "rows", **stats: Any) -> int:
        _, g, _ = groups(tuple(shape), layout)
        meta = np.dtype(self.payload_dtypes[1]).itemsize
        return int(np.prod(shape, dtype=np.int64)) + 2 * meta * g + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """(tensor, params) cases for generic codec tests: odd sizes, empty, constant groups, specials."""
        cases: list[tuple[np.ndarray, dict[str, Any]]] = []
        for shape in [(2, 3, 5, 7), (1, 1, 1, 1), (3, 17), (0, 4, 2, 2), (4, 0, 3), (5,)]:
            x = (rng.standard_normal(shape) * rng.uniform(0.01, 100)).astype(np.float32)
            cases.append((x, {"layout": "rows"}))
            if len(shape) >= 2:
                cases.append((x, {"layout": "channels"}))
        special = np.array([[np.nan, 1.0, 2.0], [np.inf, -1.0, 0.5], [3.0, 3.0, 3.0], [-0.0, 1e-45, -1e30]],
                           dtype=np.float32)
        cases += [(special, {"layout": "rows"}), (np.float32(2.5).reshape(()), {"layout": "rows"})]
        return cases

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, layout: str = "rows", **params: Any) -> Payload:
        x = np.asarray(x, dtype=np.float32, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        a, g, b = groups(x.shape, layout)
        shape = np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        meta_dtype = self.payload_dtypes[1]
        if x.size == 0:
            return np.zeros(0, np.uint8), np.zeros(g, meta_dtype), np.zeros(g, meta_dtype), shape
        v = x.reshape(a, g, b)
        with np.errstate(over="ignore", invalid="ignore"):   # non-finite groups are flagged, not warned about
            lo, inv, stored_lo, stored_scale = group_meta(v, np, self.half)
            t = (v - lo[None, :, None]) * inv[None, :, None]
            codes = np.fmin(np.fmax(np.rint(t), np.float32(0)), np.float32(255)).astype(np.uint8)
        return codes.reshape(-1), stored_lo, stored_scale, shape

    def decode_cpu(self, payload: Payload, layout: str = "rows", **params: Any) -> np.ndarray:
        codes, lo, scale, shape_arr = payload
        shape = tuple(int(d) for d in np.asarray(shape_arr).reshape(-1))
        a, g, b = groups(shape, layout)
        codes, lo, scale = self._checked(np.asarray(codes), np.asarray(lo), np.asarray(scale), shape, g)
        if codes.size == 0:
            return np.zeros(shape, np.float32)
        v = codes.reshape(a, g, b).astype(np.float32)
        return (lo[None, :, None] + v * scale[None, :, None]).reshape(shape)

    def _checked(self, codes: Any, lo: Any, scale: Any, shape: tuple[int, ...], g: int) -> tuple[Any, Any, Any]:
        """Payload arrays as the arithmetic reads them (lo/scale as float32), after size and dtype checks."""
        n = int(np.prod(shape, dtype=np.int64))
        if codes.dtype != np.uint8 or codes.size != n:
            raise ValueError(f"{self.name}: codes must be uint8[{n}] for shape {shape}, got {codes.dtype}[{codes.size}]")
        meta = np.dtype(self.payload_dtypes[1])
        if lo.dtype != meta or scale.dtype != meta or lo.size != g or scale.size != g:
            raise ValueError(f"{self.name}: lo and scale must be {meta}[{g}], got {lo.dtype}[{lo.size}] and "
                             f"{scale.dtype}[{scale.size}]")
        if self.half:
            lo, scale = (m.reshape(-1).view(np.float16).astype(np.float32) for m in (lo, scale))
        return codes.reshape(-1), lo.reshape(-1), scale.reshape(-1)

    # -- CuPy -------------------------------------------------------------------------------------------
    def encode_gpu(self, x: Any, layout: str = "rows", **params: Any) -> Payload:
        cp = _cp()
        shape = tuple(x.shape)  # before ascontiguousarray, which makes a 0-d array 1-d in CuPy
        x = cp.ascontiguousarray(x, dtype=cp.float32)
        a, g, b = groups(shape, layout)
        meta_dtype = self.payload_dtypes[1]
        if x.size == 0:
            return (cp.zeros(0, cp.uint8), cp.zeros(g, meta_dtype), cp.zeros(g, meta_dtype),
                    gpu.shape_array(shape))
        lo, inv, stored_lo, stored_scale = group_meta(x.reshape(a, g, b), cp, self.half)
        codes = cp.empty(x.size, dtype=cp.uint8)
        gpu.launch("q8.cu", "q8_encode", x.size, (x, lo, inv, codes, gpu.i64(x.size), gpu.i64(g), gpu.i64(b)))
        return codes, stored_lo, stored_scale, gpu.shape_array(shape)

    def decode_gpu(self, payload: Payload, layout: str = "rows", **params: Any) -> Any:
        cp = _cp()
        codes, lo, scale, shape_arr = payload
        shape = gpu.host_shape(shape_arr)
        _, g, b = groups(shape, layout)
        codes, lo, scale = self._checked(cp.ascontiguousarray(codes), cp.ascontiguousarray(lo),
                                         cp.ascontiguousarray(scale), shape, g)
        y = cp.empty(codes.size, dtype=cp.float32)
        gpu.launch("q8.cu", "q8_decode", codes.size, (codes, cp.ascontiguousarray(lo, dtype=cp.float32),
                                                      cp.ascontiguousarray(scale, dtype=cp.float32), y,
                                                      gpu.i64(codes.size), gpu.i64(g), gpu.i64(b)))
        return y.reshape(shape)


@register
class Q8Half(Q8):
    """q8 with lo and scale held as float16 (uint16 bits): 4 bytes per group instead of 8."""
    name = "q8h"
    payload_dtypes = ("uint8", "uint16", "uint16", "int64")
    half = True


def _cp() -> Any:
    import cupy as cp

    return cp
