"""Gist's Delayed Precision Reduction (ISCA'18 §III-B, §IV-A): stash a float32 activation in a narrower float.

Four codecs, one per storage format (all "IEEE-like": sign, biased exponent, mantissa with implicit leading 1):

============  ====  ========  ========  ====  ==========  ==================
codec         bits  exponent  mantissa  bias  max finite  smallest subnormal
============  ====  ========  ========  ====  ==========  ==================
``dpr_fp16``  16    5         10        15    65504       2**-24
``dpr_bf16``  16    8         7         127   3.3895e38   2**-133
``dpr_fp10``  10    5         4         15    63488       2**-18
``dpr_fp8``   8     4         3         7     240         2**-9
============  ====  ========  ========  ====  ==========  ==================

fp16 is IEEE binary16, bf16 is bfloat16, fp10 and fp8 are Gist's 1-5-4 and 1-4-3 formats. Gist leaves the fp8
bias and special values open; we use the IEEE convention throughout (bias 2**(e-1)-1, the all-ones exponent
reserved for Inf/NaN), which is ``ml_dtypes.float8_e4m3`` for fp8 (not the OCP E4M3FN variant with max 448).

Conversion float32 -> format (both backends, bit for bit):

* Rounding: round to nearest, ties to even (Gist: "round-to-nearest").
* Overflow: as Gist says, a finite value whose magnitude rounds above the largest finite value is clamped to
  it (saturation, sign kept) -- never turned into Inf.
* Underflow: Gist flushes denormals ("we ignore denormalized numbers"); we keep them. The encodings exist
  anyway, and flushing would zero every activation below 2**-6 = 0.0156 in fp8 (2**-14 in fp10/fp16), where
  gradual underflow keeps them to within half a subnormal step. So values below the smallest normal round
  (RNE) to the nearest subnormal; magnitudes up to half the smallest subnormal (ties to even) become a zero of
  the same sign. Relative error is therefore bounded by ``2**-(mbits+1)`` only in the normal range; below it
  the absolute error is at most half the smallest subnormal. float32 subnormal inputs are handled exactly
  (they all flush to signed zero except in bf16, which shares float32's exponent range).
* Zeros keep their sign; exact zeros decode to exact zeros.
* ±Inf stays ±Inf (every format here has Inf). NaN becomes the format's canonical quiet NaN (all-ones
  exponent, top mantissa bit set) with the sign kept; the float32 NaN payload is dropped.

Decode (format -> float32) is exact: every value of every format is a float32. A NaN code decodes to a float32
NaN with the code's mantissa bits on top (the usual widening: ``numpy`` float16 -> float32 does the same).

Payloads (``packed``, ``shape`` int64[ndim]), elements in flattened C order:

* ``dpr_fp16`` / ``dpr_bf16``: uint16[n], the format's bit pattern.
* ``dpr_fp10``: uint32[ceil(n/3)]; element i is bits ``10*(i%3) .. 10*(i%3)+9`` of word ``i//3`` (first element
  in the low bits); bits 30-31 are 0, as are the unused fields of the last word.
* ``dpr_fp8``: uint8[n].

The codecs take no params (any given are ignored, as in the other codecs). ``quantize(x, fmt)`` is the same
float32 -> format -> float32 round trip without the packing, for tests and error-injection experiments.

NumPy backend: vectorised uint32 bit arithmetic over fixed-size chunks, so its temporaries stay in cache and
its transient memory is bounded (a few MiB) whatever the tensor size -- this runs inside the forward pass,
next to the activation it is shrinking. Decoding of the narrow formats is a gather from a value table built by
the same arithmetic the CUDA kernel uses (``kernels/dpr.cu``).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from . import cpu, gpu
from .base import Codec, Payload, register

_CHUNK = 3 << 16  # elements per NumPy chunk (768 KiB per uint32 temporary, cache-resident); 3 | _CHUNK for fp10
_F32_INF = 0x7F800000
_F32_ABS = 0x7FFFFFFF


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point storage format with IEEE conventions (see the module docstring)."""

    name: str
    ebits: int
    mbits: int

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def inf_code(self) -> int:
        return ((1 << self.ebits) - 1) << self.mbits

    @property
    def max_code(self) -> int:
        """Code of the largest finite magnitude."""
        return self.inf_code - 1

    @property
    def nan_code(self) -> int:
        """Canonical (positive, quiet) NaN code."""
        return self.inf_code | (1 << (self.mbits - 1))

    @property
    def max_value(self) -> float:
        return float((2.0 - 2.0 ** -self.mbits) * 2.0 ** ((1 << self.ebits) - 2 - self.bias))

    @property
    def min_normal(self) -> float:
        return float(2.0 ** (1 - self.bias))

    @property
    def min_subnormal(self) -> float:
        return float(2.0 ** (1 - self.bias - self.mbits))

    @property
    def rel_error_bound(self) -> float:
        """Largest |q(x) - x| / |x| for |x| in [min_normal, max_value] under round-to-nearest."""
        return float(2.0 ** -(self.mbits + 1))

    # float32 bit-level constants of the encoder (the .cu file derives the same ones from ebits/mbits)
    @property
    def _shift(self) -> int:
        return 23 - self.mbits

    @property
    def _min_normal_f32(self) -> int:
        """float32 bits of min_normal: smaller magnitudes take the subnormal path."""
        return (127 + 1 - self.bias) << 23

    @property
    def _round_add(self) -> int:
        """Added (mod 2**32) before the shift: half an output ulp minus one, minus the exponent rebias."""
        return ((1 << (self._shift - 1)) - 1 - ((127 - self.bias) << 23)) & 0xFFFFFFFF

    @property
    def _overflow_f32(self) -> int:
        """Smallest float32 bits that round past max_value (max + half an ulp: the tie goes to the even Inf)."""
        return int(np.float32(self.max_value).view(np.uint32)) + (1 << (self._shift - 1))

    @property
    def _sub_magic(self) -> float:
        """2**(24-bias-mbits): in [C, 2C) float32's ulp is the format's subnormal step, so bits(|x|+C)-bits(C)
        is |x| rounded (RNE) to that step, in subnormal units -- i.e. the format's code."""
        return float(2.0 ** (24 - self.bias - self.mbits))

    @cached_property
    def table(self) -> np.ndarray:
        """float32 value of every code (index = code), built by the same arithmetic as the CUDA decoder."""
        return _decode_arith(np.arange(1 << self.bits, dtype=np.uint32), self)


FORMATS: dict[str, FloatFormat] = {
    "fp16": FloatFormat("fp16", 5, 10),
    "bf16": FloatFormat("bf16", 8, 7),
    "fp10": FloatFormat("fp10", 5, 4),
    "fp8": FloatFormat("fp8", 4, 3),
}


def get_format(fmt: str | FloatFormat) -> FloatFormat:
    """A FloatFormat from its name ("fp16", "bf16", "fp10", "fp8"), a codec name ("dpr_fp8"), or itself."""
    if isinstance(fmt, FloatFormat):
        return fmt
    key = fmt[4:] if isinstance(fmt, str) and fmt.startswith("dpr_") else fmt
    try:
        return FORMATS[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown DPR format {fmt!r}; known: {', '.join(FORMATS)}") from None


# -- NumPy bit arithmetic ---------------------------------------------------------------------------------
def _encode_chunk(u: np.ndarray, f: FloatFormat, out: np.ndarray, a: np.ndarray, t: np.ndarray,
                  w: np.ndarray, m: np.ndarray) -> None:
    """Codes of float32 bit patterns ``u`` (uint32) into ``out``; a, t, w, m: uint32 scratch of u's size
    (preallocated: per-chunk allocations this size would be mmap'd and page-faulted every time).

    Every step is a plain ufunc pass: ``copyto(where=)`` / ``minimum`` measured 70x / 4x slower than
    add here, so lanes are merged with a bit blend and the rare fix-ups run only when the chunk needs them.
    """
    u32 = np.uint32
    np.bitwise_and(u, u32(_F32_ABS), out=a)
    amax = int(a.max()) if a.size else 0
    # Normal range: RNE at bit `shift` (add half-ulp-minus-one plus the kept LSB; a carry into the exponent
    # is the correct round-up), rebias the exponent, shift down.
    np.right_shift(a, u32(f._shift), out=t)
    np.bitwise_and(t, u32(1), out=t)
    np.add(t, a, out=t)
    np.add(t, u32(f._round_add), out=t)  # wraps for magnitudes below the range: replaced just below
    np.right_shift(t, u32(f._shift), out=t)
    if f.bias != 127:
        # Below min_normal (zeros included): |x| + C rounds |x| to the subnormal step, see _sub_magic.
        # (bf16 shares float32's exponent range, so the normal-range path is already exact for it.)
        magic = np.float32(f._sub_magic)
        with np.errstate(all="ignore"):  # signalling NaNs raise "invalid"; their lanes are replaced below
            np.add(a.view(np.float32), magic, out=w.view(np.float32))
        np.subtract(w, magic.view(np.uint32), out=w)
        # m = all ones where a < min_normal: a - min_normal is negative exactly there (both below 2**31).
        np.subtract(a, u32(f._min_normal_f32), out=m)
        np.right_shift(m.view(np.int32), 31, out=m.view(np.int32))  # arithmetic shift: 0 or -1
        np.bitwise_xor(t, w, out=w)
        np.bitwise_and(w, m, out=w)
        np.bitwise_xor(t, w, out=t)  # t = where(m, subnormal code, normal code)
    if amax >= f._overflow_f32:  # some finite value rounds past the max: saturate (Gist's clamping)
        np.minimum(t, u32(f.max_code), out=t)
    if amax >= _F32_INF:  # Inf/NaN are rare: fix them up only when present
        special = a >= u32(_F32_INF)
        t[special] = np.where(a[special] == u32(_F32_INF), u32(f.inf_code), u32(f.nan_code))
    np.right_shift(u, u32(31 - f.ebits - f.mbits), out=w)
    np.bitwise_and(w, u32(f.sign_bit), out=w)
    np.bitwise_or(t, w, out=t)
    out[...] = t  # narrowing cast to uint16 / uint8: the codes fit


def _decode_arith(codes: np.ndarray, f: FloatFormat) -> np.ndarray:
    """float32 values of codes (uint32), by the decoder's bit arithmetic (used to build ``table``)."""
    c = codes.astype(np.uint32)
    sign = (c >> np.uint32(f.ebits + f.mbits)) << np.uint32(31)
    e = (c >> np.uint32(f.mbits)) & np.uint32((1 << f.ebits) - 1)
    m = c & np.uint32((1 << f.mbits) - 1)
    mant = m << np.uint32(23 - f.mbits)
    emax = (1 << f.ebits) - 1
    normal = ((e + np.uint32(127 - f.bias)) << np.uint32(23)) | mant
    special = np.uint32(_F32_INF) | mant
    # Subnormal: m * 2**(1-bias-mbits), an exact float32 product (zero for m == 0).
    sub = (m.astype(np.float32) * np.float32(f.min_subnormal)).view(np.uint32)
    bits = np.where(e == emax, special, np.where(e == 0, sub, normal)) | sign
    return bits.astype(np.uint32).view(np.float32)


def _code_dtype(f: FloatFormat) -> type:
    return np.uint8 if f.bits <= 8 else np.uint16


def _float_bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"DPR encodes float32 tensors, got {x.dtype}")
    return np.ascontiguousarray(x).reshape(-1).view(np.uint32)


def _encode_chunks(u: np.ndarray, f: FloatFormat) -> Iterator[tuple[int, int, np.ndarray]]:
    """(lo, hi, codes of u[lo:hi]) chunk by chunk; the codes array is reused: consume it before the next."""
    n = u.size
    m = min(n, _CHUNK)
    a, t, w, mask = (np.empty(m, dtype=np.uint32) for _ in range(4))
    codes = np.empty(m, dtype=_code_dtype(f))
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        k = hi - lo
        _encode_chunk(u[lo:hi], f, codes[:k], a[:k], t[:k], w[:k], mask[:k])
        yield lo, hi, codes[:k]


def encode_bits(x: np.ndarray, fmt: str | FloatFormat) -> np.ndarray:
    """Flat codes (uint8 for <= 8-bit formats, else uint16) of a float32 array, in flattened C order."""
    f = get_format(fmt)
    u = _float_bits(x)
    if f.name != "fp10" and (k := cpu.kernels("dpr")) is not None:
        return k.encode(u, f)
    out = np.empty(u.size, dtype=_code_dtype(f))
    for lo, hi, codes in _encode_chunks(u, f):
        out[lo:hi] = codes
    return out


def decode_bits(codes: np.ndarray, fmt: str | FloatFormat) -> np.ndarray:
    """float32 values (flat) of format codes (any unsigned integer array; only the low ``bits`` bits count)."""
    f = get_format(fmt)
    codes = np.asarray(codes).reshape(-1)
    out = np.empty(codes.size, dtype=np.float32)
    for lo in range(0, codes.size, _CHUNK):
        _decode_into(codes[lo:lo + _CHUNK], f, out[lo:lo + _CHUNK])
    return out


def _decode_into(codes: np.ndarray, f: FloatFormat, out: np.ndarray) -> None:
    if f.name == "bf16":  # bf16 is the top half of a float32: widening is a shift
        o = out.view(np.uint32)
        o[...] = codes
        np.left_shift(o, np.uint32(16), out=o)
        return
    if codes.dtype.itemsize * 8 > f.bits:
        codes = codes & codes.dtype.type((1 << f.bits) - 1)
    np.take(f.table, codes, out=out)


def quantize(x: np.ndarray, fmt: str | FloatFormat) -> np.ndarray:
    """x (float32) rounded to format ``fmt`` and widened back to float32: what a DPR round trip yields."""
    x = np.asarray(x)
    return decode_bits(encode_bits(x, fmt), fmt).reshape(x.shape)


# -- codecs -----------------------------------------------------------------------------------------------
def _shape_of(shape_arr: Any) -> tuple[int, ...]:
    shape = tuple(int(d) for d in np.asarray(shape_arr).reshape(-1))
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


class _DprCodec(Codec):
    """Shared DPR codec body; subclasses set ``fmt`` (and ``per_word`` for fp10's 3-codes-per-uint32)."""

    lossless = False
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("packed", "shape")
    kernel_file = "dpr.cu"
    fmt: ClassVar[FloatFormat]
    per_word: ClassVar[int] = 1  # codes per element of ``packed``
    per_thread: ClassVar[int] = 4  # elements of ``packed`` per CUDA thread when encoding (kernels/dpr.cu)

    def _packed_len(self, n: int) -> int:
        return -(-n // self.per_word)

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        itemsize = np.dtype(self.payload_dtypes[0]).itemsize
        return itemsize * self._packed_len(_numel(tuple(shape))) + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """(tensor, params) cases for generic codec tests: odd sizes, empty, 0-d, specials, ties, range edges."""
        f = self.fmt
        cases = [rng.standard_normal(s).astype(np.float32) for s in [(1,), (2,), (4,), (7,), (3, 5, 7),
                                                                       (2, 3, 17, 9), (0, 4), (5, 0)]]
        scaled = rng.standard_normal(4000) * np.exp2(rng.uniform(np.log2(f.min_subnormal) - 3,
                                                                 np.log2(f.max_value) + 2, 4000))
        with np.errstate(over="ignore"):  # bf16's range reaches float32's: some become Inf, which is fine
            cases.append(scaled.astype(np.float32))
            special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.0, 1.0, -2.5,
                                f.max_value, -f.max_value, 2 * f.max_value, 3.4e38, -3.4e38, f.min_normal,
                                f.min_subnormal, f.min_subnormal / 2, -f.min_subnormal * 1.5], dtype=np.float32)
        cases.append(rng.integers(0, 2**32, size=2001, dtype=np.uint64).astype(np.uint32).view(np.float32))
        cases += [special, np.array([0x7FC00001, 0xFF800123, 0x7F800001, 0x80000000], np.uint32).view(np.float32),
                  np.zeros((4, 9), np.float32), np.full((3, 11), -0.0, np.float32), np.float32(2.5).reshape(())]
        return [(c, {}) for c in cases]

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        x = np.asarray(x)
        return encode_bits(x, self.fmt), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)

    def _check_packed(self, packed: Any, shape: tuple[int, ...]) -> int:
        n = _numel(shape)
        if packed.dtype != np.dtype(self.payload_dtypes[0]):
            raise ValueError(f"{self.name}: packed payload must be {self.payload_dtypes[0]}, got {packed.dtype}")
        if packed.size != self._packed_len(n):
            raise ValueError(f"{self.name}: {packed.size} packed elements cannot hold shape {shape}")
        return n

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        packed, shape_arr = payload
        shape = _shape_of(shape_arr)
        packed = np.asarray(packed).reshape(-1)
        n = self._check_packed(packed, shape)
        if (k := cpu.kernels("dpr")) is not None:
            return k.decode(np.ascontiguousarray(packed), self.fmt, n).reshape(shape)
        return decode_bits(packed, self.fmt).reshape(shape)

    # -- CuPy -------------------------------------------------------------------------------------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        if x.dtype != cp.float32:
            raise ValueError(f"DPR encodes float32 tensors, got {x.dtype}")
        shape = tuple(x.shape)  # before ascontiguousarray, which makes a 0-d array 1-d in CuPy
        x = cp.ascontiguousarray(x)
        n = int(x.size)
        m = self._packed_len(n)
        packed = cp.empty(m, dtype=self.payload_dtypes[0])
        gpu.launch(self.kernel_file, f"{self.name}_encode", -(-m // self.per_thread),
                   (x.reshape(-1), packed, gpu.i64(n), gpu.i64(m)))
        return packed, gpu.shape_array(shape)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        packed, shape_arr = payload
        shape = gpu.host_shape(shape_arr)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        packed = cp.ascontiguousarray(packed).reshape(-1)
        n = self._check_packed(packed, shape)
        y = cp.empty(n, dtype=cp.float32)
        gpu.launch(self.kernel_file, f"{self.name}_decode", -(-n // 4), (packed, y, gpu.i64(n)))  # 4 per thread
        return y.reshape(shape)


@register
class DprFp16(_DprCodec):
    """IEEE binary16 bits in uint16 (PyOps cannot output float16)."""

    name = "dpr_fp16"
    fmt = FORMATS["fp16"]
    payload_dtypes = ("uint16", "int64")


@register
class DprBf16(_DprCodec):
    """bfloat16 bits (the top half of the rounded float32) in uint16."""

    name = "dpr_bf16"
    fmt = FORMATS["bf16"]
    payload_dtypes = ("uint16", "int64")


@register
class DprFp10(_DprCodec):
    """Gist's FP10 (1-5-4), three codes per uint32 word (see the module docstring for the layout)."""

    name = "dpr_fp10"
    fmt = FORMATS["fp10"]
    payload_dtypes = ("uint32", "int64")
    per_word = 3
    per_thread = 1

    # Chunks hold a multiple of 3 codes, so each chunk maps to whole words.
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        x = np.asarray(x)
        u = _float_bits(x)
        if (k := cpu.kernels("dpr")) is not None:
            return k.encode(u, self.fmt), np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        words = np.zeros(self._packed_len(u.size), dtype=np.uint32)
        for lo, hi, codes in _encode_chunks(u, self.fmt):
            _pack3(codes, words[lo // 3: -(-hi // 3)])
        return words, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        packed, shape_arr = payload
        shape = _shape_of(shape_arr)
        packed = np.asarray(packed).reshape(-1)
        n = self._check_packed(packed, shape)
        if (k := cpu.kernels("dpr")) is not None:
            return k.decode(np.ascontiguousarray(packed), self.fmt, n).reshape(shape)
        out = np.empty(n, dtype=np.float32)
        wchunk = _CHUNK // 3
        codes = np.empty((min(packed.size, wchunk), 3), dtype=np.uint16)
        for wlo in range(0, packed.size, wchunk):
            words = packed[wlo:wlo + wchunk]
            c = codes[:words.size]
            for j in range(3):
                np.right_shift(words, np.uint32(10 * j), out=c[:, j], casting="unsafe")
            np.bitwise_and(c, np.uint16(0x3FF), out=c)
            lo = 3 * wlo
            hi = min(lo + 3 * words.size, n)
            np.take(self.fmt.table, c.reshape(-1)[:hi - lo], out=out[lo:hi])
        return out.reshape(shape)


def _pack3(codes: np.ndarray, words: np.ndarray) -> None:
    """words[j] = codes[3j] | codes[3j+1] << 10 | codes[3j+2] << 20 (missing trailing codes count as 0)."""
    full = codes.size // 3
    c = codes[:3 * full].reshape(full, 3)
    w = words[:full]
    w[...] = c[:, 2]
    np.left_shift(w, np.uint32(10), out=w)
    np.bitwise_or(w, c[:, 1], out=w)
    np.left_shift(w, np.uint32(10), out=w)
    np.bitwise_or(w, c[:, 0], out=w)
    if codes.size > 3 * full:  # the last, partial word: at most 2 codes
        words[full] = sum(int(code) << (10 * j) for j, code in enumerate(codes[3 * full:].tolist()))


@register
class DprFp8(_DprCodec):
    """Gist's FP8 (1-4-3, IEEE-like with Inf, max 240), one uint8 per element."""

    name = "dpr_fp8"
    fmt = FORMATS["fp8"]
    payload_dtypes = ("uint8", "int64")
