"""``zfp``: fixed-rate lossy codec of the ZFP family (Lindstrom 2014; CSWAP+, FreeLunch) for float32 tensors.

Every block of the tensor costs exactly ``rate`` bits per value, so the payload size depends only on the
shape, and block ``b`` starts at bit ``b · budget`` of the stream (random access).

Blocks. Dimensions of size 1 are dropped first (NCHW with H = W = 1 becomes (N, C)). A tensor with >= 2
dimensions left is a stack of ``P`` planes (the product of the leading dimensions) of ``H × W`` (the last two),
cut into 4×4 blocks, plane-major, then block row, then block column; a tensor with fewer dimensions is cut
into 1-D blocks of 4 (flattened C order). Partial blocks are padded by repeating the last valid row / column
(element), which adds no high-frequency content. ``budget`` = rate · 16 (2-D) or rate · 4 (1-D) bits.

Per block (both backends, bit for bit):

1. Specials: NaN/±Inf are taken out of band (flat index + raw float32 bits, restored exactly on decode) and
   coded as 0.
2. Block floating point: ``emax`` = frexp exponent of the block's largest magnitude (|x| < 2**emax);
   ``q = trunc(x · 2**(28 − emax))`` in float64 (exact scaling, also for subnormals), so |q| < 2**28.
   An all-zero block stores exponent field 0 and nothing else; otherwise the field is ``emax + 149``
   (1..277), 9 bits.
3. Decorrelating transform: the integer S-transform (two-level Haar lifting), exactly invertible on integers:
   ``(a0, a1, a2, a3) -> (ss, dd, d0, d1)`` with ``d0 = a0 − a1, s0 = a1 + (d0 >> 1)``,
   ``d1 = a2 − a3, s1 = a3 + (d1 >> 1)``, ``dd = s0 − s1, ss = s1 + (dd >> 1)`` (arithmetic shifts).
   2-D blocks: along each row, then along each column (ZFP's order), |coefficient| < 2**30.
   Coefficients are reordered by total sequency (ZFP's 2-D permutation) and mapped to negabinary
   ``u = ((c + 0xAAAAAAAA) ^ 0xAAAAAAAA) mod 2**32``, so the sign needs no separate bit.
4. Embedded bit-plane coding, planes 31 down to 0, with ZFP's group testing: ``n`` (0 at the start) counts
   the leading coefficients already known to be significant. Per plane: its bits of coefficients
   ``0..n−1`` verbatim; then, from position ``j = n``: a group bit "is any bit at position >= j set?"
   (0 ends the plane), and if so the bits at ``j, j+1, ...`` up to and including the next 1, which makes
   every coefficient up to it significant; repeat. The bit of coefficient 15 is never written when it must
   be 1 (the group bit said so). This is ZFP's ``encode_ints`` bit for bit.
5. Fixed rate: the stream of each block is cut at ``budget`` bits (zero-filled when shorter). The decoder
   stops at the first bit it would read at or past the budget; undecoded bits are 0.

Decode: negabinary back to int64, inverse permutation and transform in int64, ``y = q · 2**(emax − 28)`` in
float64, saturated to ±FLT_MAX (finite in, finite out), rounded to float32 (RNE). Exact zeros come back as
+0.0 (−0.0 too); NaN/±Inf come back with their exact bits.

Payload (``payload_names``):
  header       uint8[8]: b"ZF", version 1, rate (3..32), 4 zero bytes
  data         uint32[ceil(nblocks · budget / 32)]; stream bit i is bit (i % 32) of word i // 32
  outlier_idx  int64[m]   ascending flat indices of NaN/±Inf elements
  outlier_bits uint32[m]  their raw float32 bits
  shape        int64[ndim]

The NumPy backend works on chunks of blocks, one vector op per coefficient position and bit plane across
every block of the chunk (the per-block serial state of the group test becomes per-block arrays); the
CUDA kernel (``kernels/zfp.cu``) runs one thread per block and produces the same words.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import gpu
from .base import Codec, Payload, register

VERSION = 1
HEADER_BYTES = 8
MIN_RATE, MAX_RATE = 3, 32
PRECISION = 26                  # |q| < 2**PRECISION after block-floating-point scaling
EXP_BITS = 9                    # exponent field: 0 = all-zero block, else emax + EXP_BIAS
EXP_BIAS = 149                  # frexp exponents of finite float32 magnitudes span -148..128
PLANES = 32
NEGABINARY = 0xAAAAAAAA
_MAGIC = b"ZF"
_F32_MAX = float(np.finfo(np.float32).max)
# ZFP's 2-D coefficient order by total sequency; entry = col + 4 * row of the transformed block.
PERM_2D = np.array([0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15], dtype=np.intp)
PERM_1D = np.arange(4, dtype=np.intp)
_BITLEN16 = np.frexp(np.arange(1 << 16, dtype=np.float64))[1].astype(np.int64)

# The compiled block coder (same words) when numba is installed, else the vectorised NumPy coder below.
# Imported on first use, not with the package: numba + LLVM add ~70 MiB of RSS on import and ~60 MiB more
# when the cached kernels load (measured), which processes that never encode with zfp should not pay.
# ONNXCOMP_ZFP_NUMBA=0 keeps the NumPy coder (no fixed cost, ~10x slower), as does ONNXCOMP_CODEC_BACKEND=numpy.
USE_NUMBA = importlib.util.find_spec("numba") is not None and os.environ.get("ONNXCOMP_ZFP_NUMBA", "1") != "0"
_zfp_numba: Any = None


def _use_compiled() -> bool:
    from .cpu import backend_for

    return USE_NUMBA and backend_for("zfp") == "numba"


def _compiled() -> Any:
    global _zfp_numba
    if _zfp_numba is None:
        from types import SimpleNamespace

        from . import cpu

        cpu.threading_layer()  # workqueue unless NUMBA_THREADING_LAYER says otherwise (see custom_ops/cpu)
        from . import _zfp_numba as mod

        # behind the codec kernels' launch lock: workqueue allows one parallel launch at a time
        _zfp_numba = SimpleNamespace(encode=cpu._locked(mod.encode), decode=cpu._locked(mod.decode))
    return _zfp_numba

if sys.byteorder != "little":  # the uint32 stream words are little-endian
    raise ImportError("the zfp codec's NumPy backend needs a little-endian machine")


# -- params, header, layout -----------------------------------------------------------------------------------
def check_rate(rate: Any) -> int:
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) and not (
            isinstance(rate, float) and float(rate).is_integer()):
        raise ValueError(f"zfp: rate must be an integer number of bits per value in [{MIN_RATE}, {MAX_RATE}], "
                         f"got {rate!r}")
    r = int(rate)
    if not MIN_RATE <= r <= MAX_RATE:
        raise ValueError(f"zfp: rate must be in [{MIN_RATE}, {MAX_RATE}] bits per value, got {r}")
    return r


def _encode_params(params: dict[str, Any]) -> int:
    unknown = set(params) - {"rate"}
    if unknown:
        raise ValueError(f"zfp: unknown params {sorted(unknown)}; known: ['rate']")
    if "rate" not in params:
        raise ValueError(f"zfp: encode needs rate= (bits per value, {MIN_RATE}..{MAX_RATE})")
    return check_rate(params["rate"])


def make_header(rate: int) -> np.ndarray:
    return np.frombuffer(_MAGIC + bytes([VERSION, rate, 0, 0, 0, 0]), dtype=np.uint8).copy()


def parse_header(header: Any) -> int:
    """The rate stored in a zfp header; ValueError if it is not a zfp v1 header."""
    h = np.asarray(header, dtype=np.uint8).reshape(-1)
    if h.size != HEADER_BYTES or bytes(h[:2]) != _MAGIC:
        raise ValueError("zfp: payload header is not a zfp header")
    if int(h[2]) != VERSION:
        raise ValueError(f"zfp: unsupported payload version {int(h[2])}")
    return check_rate(int(h[3]))


@dataclass(frozen=True)
class Layout:
    """How a shape is cut into blocks: ``planes`` stacked ``height × width`` arrays, ``bh × bw`` blocks."""

    planes: int
    height: int
    width: int
    bh: int
    bw: int

    @property
    def block_rows(self) -> int:
        return -(-self.height // self.bh)

    @property
    def block_cols(self) -> int:
        return -(-self.width // self.bw)

    @property
    def nblocks(self) -> int:
        return self.planes * self.block_rows * self.block_cols

    @property
    def block_size(self) -> int:
        return self.bh * self.bw

    @property
    def two_d(self) -> bool:
        return self.bh == 4


def layout_of(shape: tuple[int, ...]) -> Layout:
    n = int(np.prod(shape, dtype=np.int64))
    dims = [int(d) for d in shape if d != 1]
    if n == 0:
        return Layout(0, 0, 0, 4, 4) if len(dims) >= 2 else Layout(0, 1, 0, 1, 4)
    if len(dims) >= 2:
        return Layout(int(np.prod(dims[:-2], dtype=np.int64)), dims[-2], dims[-1], 4, 4)
    return Layout(1, 1, n, 1, 4)


def budget_bits(layout: Layout, rate: int) -> int:
    return rate * layout.block_size


def data_words(layout: Layout, rate: int) -> int:
    return -(-layout.nblocks * budget_bits(layout, rate) // 32)


# -- integer transform ----------------------------------------------------------------------------------------
def _fwd4(a0: np.ndarray, a1: np.ndarray, a2: np.ndarray, a3: np.ndarray) -> tuple[np.ndarray, ...]:
    d0 = a0 - a1
    s0 = (a1 + (d0 >> 1)) << 1
    d1 = a2 - a3
    s1 = (a3 + (d1 >> 1)) << 1
    dd = s0 - s1
    ss = (s1 + (dd >> 1)) << 1
    return ss, dd, d0, d1


def _inv4(ss: np.ndarray, dd: np.ndarray, d0: np.ndarray, d1: np.ndarray) -> tuple[np.ndarray, ...]:
    s1 = (ss >> 1) - (dd >> 1)
    s0 = dd + s1
    a1 = (s0 >> 1) - (d0 >> 1)
    a0 = d0 + a1
    a3 = (s1 >> 1) - (d1 >> 1)
    a2 = d1 + a3
    return a0, a1, a2, a3


def forward_transform(q: np.ndarray, two_d: bool) -> np.ndarray:
    """int64 [B, 16] (col + 4·row) or [B, 4] blocks -> transformed coefficients, same layout."""
    c = q.copy()
    if not two_d:
        c[:, 0], c[:, 1], c[:, 2], c[:, 3] = _fwd4(q[:, 0], q[:, 1], q[:, 2], q[:, 3])
        return c
    for r in range(4):  # along x (each row)
        i = 4 * r
        c[:, i], c[:, i + 1], c[:, i + 2], c[:, i + 3] = _fwd4(c[:, i], c[:, i + 1], c[:, i + 2], c[:, i + 3])
    for col in range(4):  # along y (each column)
        c[:, col], c[:, col + 4], c[:, col + 8], c[:, col + 12] = _fwd4(
            c[:, col], c[:, col + 4], c[:, col + 8], c[:, col + 12])
    return c


def inverse_transform(c: np.ndarray, two_d: bool) -> np.ndarray:
    q = c.copy()
    if not two_d:
        q[:, 0], q[:, 1], q[:, 2], q[:, 3] = _inv4(c[:, 0], c[:, 1], c[:, 2], c[:, 3])
        return q
    for col in range(4):
        q[:, col], q[:, col + 4], q[:, col + 8], q[:, col + 12] = _inv4(
            q[:, col], q[:, col + 4], q[:, col + 8], q[:, col + 12])
    for r in range(4):
        i = 4 * r
        q[:, i], q[:, i + 1], q[:, i + 2], q[:, i + 3] = _inv4(q[:, i], q[:, i + 1], q[:, i + 2], q[:, i + 3])
    return q


def to_negabinary(c: np.ndarray) -> np.ndarray:
    return ((c + NEGABINARY) ^ NEGABINARY) & 0xFFFFFFFF


def from_negabinary(u: np.ndarray) -> np.ndarray:
    return (u ^ NEGABINARY) - NEGABINARY


# -- blocks <-> tensor ----------------------------------------------------------------------------------------
_CHUNK_BLOCKS = 8192  # blocks per NumPy chunk: keeps the per-position temporaries cache-sized


def _chunks(layout: Layout) -> list[tuple[int, int]]:
    """(first, last) block ranges that start on a plane boundary for 2-D layouts (1-D: any)."""
    nb = layout.nblocks
    if nb == 0:
        return []
    if not layout.two_d:
        return [(b, min(b + _CHUNK_BLOCKS, nb)) for b in range(0, nb, _CHUNK_BLOCKS)]
    per_plane = layout.block_rows * layout.block_cols
    step = max(1, _CHUNK_BLOCKS // max(per_plane, 1)) * per_plane
    return [(b, min(b + step, nb)) for b in range(0, nb, step)]


def _gather(flat: np.ndarray, layout: Layout, b0: int, b1: int) -> np.ndarray:
    """float32 [b1-b0, block_size] of blocks b0..b1 (edge-padded)."""
    if not layout.two_d:
        idx = np.minimum(np.arange(4 * b0, 4 * b1, dtype=np.int64), flat.size - 1)
        return flat[idx].reshape(b1 - b0, 4)
    per_plane = layout.block_rows * layout.block_cols
    p0, p1 = b0 // per_plane, b1 // per_plane
    h, w = layout.height, layout.width
    planes = flat.reshape(layout.planes, h, w)[p0:p1]
    hp, wp = 4 * layout.block_rows, 4 * layout.block_cols
    if (hp, wp) != (h, w):
        planes = np.pad(planes, ((0, 0), (0, hp - h), (0, wp - w)), mode="edge")
    blocks = planes.reshape(p1 - p0, layout.block_rows, 4, layout.block_cols, 4).transpose(0, 1, 3, 2, 4)
    return blocks.reshape(b1 - b0, 16)


def _scatter(y: np.ndarray, vals: np.ndarray, layout: Layout, b0: int, b1: int) -> None:
    if not layout.two_d:
        flat = vals.reshape(-1)
        end = min(4 * b1, y.size)
        y[4 * b0:end] = flat[:end - 4 * b0]
        return
    per_plane = layout.block_rows * layout.block_cols
    p0, p1 = b0 // per_plane, b1 // per_plane
    blocks = vals.reshape(p1 - p0, layout.block_rows, layout.block_cols, 4, 4).transpose(0, 1, 3, 2, 4)
    planes = blocks.reshape(p1 - p0, 4 * layout.block_rows, 4 * layout.block_cols)
    y.reshape(layout.planes, layout.height, layout.width)[p0:p1] = planes[:, :layout.height, :layout.width]


# -- the block coder, vectorised over blocks ------------------------------------------------------------------
def _encode_chunk(v: np.ndarray, two_d: bool, budget: int) -> np.ndarray:
    """Stream bits uint8 [B, budget] of float32 blocks v [B, size] (specials already zeroed)."""
    nb, size = v.shape
    perm = PERM_2D if two_d else PERM_1D
    amax = np.abs(v).max(axis=1)
    nonzero = amax > 0
    emax = np.frexp(amax)[1].astype(np.int64)
    q = np.trunc(np.ldexp(v.astype(np.float64), (PRECISION - emax)[:, None])).astype(np.int64)
    u = to_negabinary(forward_transform(q, two_d)[:, perm])
    # planes[:, k]: bit i = bit k of coefficient i
    ks = np.arange(PLANES, dtype=np.int64)
    planes = np.zeros((nb, PLANES), dtype=np.int64)
    for i in range(size):
        planes |= ((u[:, i:i + 1] >> ks) & 1) << i
    bits = np.zeros((nb, budget + 1), dtype=np.uint8)  # column `budget`: sink for cut-off bits
    rows = np.arange(nb)
    efield = np.where(nonzero, emax + EXP_BIAS, 0)
    bits[:, :EXP_BITS] = (efield[:, None] >> np.arange(EXP_BITS)) & 1
    pos = np.where(nonzero, EXP_BITS, budget).astype(np.int64)  # zero blocks: nothing more
    n = np.zeros(nb, dtype=np.int64)

    def put(mask: np.ndarray, val: np.ndarray) -> None:
        nonlocal pos
        bits[rows, np.where(mask, np.minimum(pos, budget), budget)] = val
        pos += mask

    for k in range(PLANES - 1, -1, -1):
        live = pos < budget
        if not live.any():
            break
        x = planes[:, k]
        stopped = ~live
        seg = np.ones(nb, dtype=bool)
        for j in range(size):
            xj = ((x >> j) & 1).astype(np.uint8)
            new = (j >= n) & ~stopped
            rem = (x >> j) != 0
            group = new & seg
            # first bit at this position: verbatim (j < n) or the group test (j >= n at a segment start)
            put(((j < n) & live) | group, np.where(j < n, xj, rem.astype(np.uint8)))
            stopped |= group & ~rem
            new &= ~stopped
            if j < size - 1:
                put(new, xj)
            seg = np.where(new, xj == 1, seg)
        hi = _BITLEN16[x]
        n = np.where((x >> n) != 0, hi, n)
    return bits[:, :budget]


def _decode_chunk(bits: np.ndarray, two_d: bool, budget: int) -> np.ndarray:
    """float32 [B, size] blocks from stream bits uint8 [B, budget]."""
    nb = bits.shape[0]
    size = 16 if two_d else 4
    perm = PERM_2D if two_d else PERM_1D
    padded = np.zeros((nb, budget + 1), dtype=np.uint8)  # column `budget` reads as 0
    padded[:, :budget] = bits
    rows = np.arange(nb)
    efield = (bits[:, :EXP_BITS].astype(np.int64) << np.arange(EXP_BITS)).sum(axis=1)
    if efield.size and int(efield.max()) > 128 + EXP_BIAS:
        raise ValueError(f"zfp: block exponent field {int(efield.max())} out of range")
    nonzero = efield > 0
    emax = efield - EXP_BIAS
    pos = np.full(nb, EXP_BITS, dtype=np.int64)
    done = ~nonzero
    n = np.zeros(nb, dtype=np.int64)
    planes = np.zeros((nb, PLANES), dtype=np.int64)

    def get(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bit, read) where mask: a read at or past the budget ends the block instead."""
        nonlocal pos, done
        out = mask & (pos >= budget)
        done |= out
        read = mask & ~out
        b = padded[rows, np.where(read, pos, budget)].astype(np.int64)
        pos += read
        return b, read

    for k in range(PLANES - 1, -1, -1):
        if done.all():
            break
        x = np.zeros(nb, dtype=np.int64)
        stopped = np.zeros(nb, dtype=bool)
        seg = np.ones(nb, dtype=bool)
        for j in range(size):
            b, read = get(~done & ((j < n) | (seg & ~stopped)))
            x |= (b & read & (j < n)) << j
            stopped |= read & (j >= n) & (b == 0)
            new = (j >= n) & ~stopped & ~done
            if j < size - 1:
                b, read = get(new)
                x |= (b & read) << j
                seg = np.where(read, b == 1, seg)
            else:
                x |= new.astype(np.int64) << j  # implicit 1: the group test said one is left
        planes[:, k] = x
        n = np.where((x >> n) != 0, _BITLEN16[x], n)
    u = np.zeros((nb, size), dtype=np.int64)
    ks = np.arange(PLANES, dtype=np.int64)
    for i in range(size):
        u[:, i] = (((planes >> i) & 1) << ks).sum(axis=1)
    c = np.empty_like(u)
    c[:, perm] = from_negabinary(u)
    q = inverse_transform(c, two_d)
    y = np.ldexp(q.astype(np.float64), (emax - PRECISION)[:, None])
    np.clip(y, -_F32_MAX, _F32_MAX, out=y)
    y[~nonzero] = 0.0
    return y.astype(np.float32)


def _stream_bits(data: np.ndarray, first_bit: int, nbits: int) -> np.ndarray:
    """uint8 bits first_bit .. first_bit+nbits of the word stream."""
    w0, w1 = first_bit // 32, -(-(first_bit + nbits) // 32)
    bits = np.unpackbits(np.ascontiguousarray(data[w0:w1]).view(np.uint8), bitorder="little")
    off = first_bit - 32 * w0
    return bits[off:off + nbits]


def zfp_stats(x: np.ndarray) -> dict[str, float]:
    """``outlier_fraction`` (NaN/±Inf share) of x: the only data-dependent part of the payload size."""
    x = np.asarray(x, dtype=np.float32)
    return {"outlier_fraction": float((~np.isfinite(x)).sum() / max(x.size, 1))}


def _split_payload(payload: Payload) -> tuple[Any, ...]:
    if len(payload) != 5:
        raise ValueError(f"zfp: payload has {len(payload)} arrays, expected 5 ({', '.join(ZFP.payload_names)})")
    return tuple(payload)


def _check_outliers(idx: Any, bits: Any, n: int) -> None:
    if idx.size != bits.size:
        raise ValueError(f"zfp: {idx.size} outlier indices but {bits.size} outlier values")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(f"zfp: outlier index outside [0, {n})")


@register
class ZFP(Codec):
    name = "zfp"
    lossless = False
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("header", "data", "outlier_idx", "outlier_bits", "shape")
    payload_dtypes = ("uint8", "uint32", "int64", "uint32", "int64")
    kernel_file = "zfp.cu"

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        """Payload bytes for ``rate`` (required) and ``outlier_fraction`` (NaN/±Inf share, default 0)."""
        if "rate" not in stats:
            raise TypeError("zfp.predicted_nbytes needs rate= (bits per value)")
        rate = check_rate(stats["rate"])
        n = int(np.prod(shape, dtype=np.int64))
        out = round(float(stats.get("outlier_fraction", 0.0)) * n)
        return HEADER_BYTES + 4 * data_words(layout_of(tuple(shape)), rate) + 12 * out + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """(tensor, params) cases for the generic codec tests: activations, odd sizes, specials, empty."""
        relu = lambda s: np.maximum(rng.standard_normal(s), 0).astype(np.float32)  # noqa: E731
        cases = [(relu((2, 3, 5, 7)), {"rate": 8}), (relu((7,)), {"rate": 4}),
                 (rng.standard_normal((3, 33)).astype(np.float32) * 100, {"rate": 12}),
                 (relu((2, 3, 17, 9)), {"rate": 16}), (relu((4, 6, 1, 1)), {"rate": 6})]
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.0, 3e38, -3e38],
                           dtype=np.float32)
        cases += [(special, {"rate": 8}), (np.zeros((4, 9), np.float32), {"rate": 8}),
                  (np.zeros((0, 4), np.float32), {"rate": 8}), (np.float32(2.5).reshape(()), {"rate": 8})]
        return cases

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        rate = _encode_params(params)
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise ValueError(f"zfp encodes float32 tensors, got {x.dtype}")
        shape = np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        flat = np.ascontiguousarray(x).reshape(-1)
        special = ~np.isfinite(flat)
        idx = np.flatnonzero(special).astype(np.int64)
        obits = flat.view(np.uint32)[idx]
        if idx.size:
            flat = np.where(special, np.float32(0), flat)
        layout = layout_of(x.shape)
        if _use_compiled():
            words = np.zeros(data_words(layout, rate), dtype=np.uint32)
            _compiled().encode(flat, flat.size, layout.height, layout.width, layout.nblocks, layout.two_d, rate,
                              PRECISION, EXP_BITS, EXP_BIAS, words)
            return make_header(rate), words, idx, obits, shape
        budget = budget_bits(layout, rate)
        stream = np.zeros(4 * data_words(layout, rate), dtype=np.uint8)
        for b0, b1 in _chunks(layout):
            bits = _encode_chunk(_gather(flat, layout, b0, b1), layout.two_d, budget)
            # a chunk may start mid-byte (1-D, odd rate): OR its bits in from the chunk's first bit
            start = b0 * budget
            packed = np.packbits(np.concatenate([np.zeros(start % 8, np.uint8), bits.reshape(-1)]),
                                 bitorder="little")
            stream[start // 8:start // 8 + packed.size] |= packed
        return make_header(rate), stream.view(np.uint32), idx, obits, shape

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        # params are ignored on purpose: the rate is in the header.
        header, data, idx, obits, shape_arr = _split_payload(payload)
        rate = parse_header(header)
        shape = tuple(int(s) for s in np.asarray(shape_arr).reshape(-1))
        if any(s < 0 for s in shape):
            raise ValueError(f"zfp: negative dimension in shape {shape}")
        n = int(np.prod(shape, dtype=np.int64))
        layout = layout_of(shape)
        data = np.ascontiguousarray(data, dtype=np.uint32).reshape(-1)
        if data.size != data_words(layout, rate):
            raise ValueError(f"zfp: data has {data.size} words, shape {shape} at rate {rate} needs "
                             f"{data_words(layout, rate)}")
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        obits = np.asarray(obits, dtype=np.uint32).reshape(-1)
        _check_outliers(idx, obits, n)
        y = np.empty(n, dtype=np.float32)
        if _use_compiled():
            if not _compiled().decode(data, n, layout.height, layout.width, layout.nblocks, layout.two_d, rate,
                                     PRECISION, EXP_BITS, EXP_BIAS, y):
                raise ValueError("zfp: block exponent field out of range")
            y.view(np.uint32)[idx] = obits
            return y.reshape(shape)
        budget = budget_bits(layout, rate)
        for b0, b1 in _chunks(layout):
            bits = _stream_bits(data, b0 * budget, (b1 - b0) * budget).reshape(b1 - b0, budget)
            _scatter(y, _decode_chunk(bits, layout.two_d, budget), layout, b0, b1)
        y.view(np.uint32)[idx] = obits
        return y.reshape(shape)

    # -- CuPy -------------------------------------------------------------------------------------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        rate = _encode_params(params)
        if x.dtype != cp.float32:
            raise ValueError(f"zfp encodes float32 tensors, got {x.dtype}")
        shape = tuple(int(s) for s in x.shape)
        flat = cp.ascontiguousarray(x).reshape(-1)
        layout = layout_of(shape)
        data = cp.zeros(data_words(layout, rate), dtype=cp.uint32)
        gpu.launch(self.kernel_file, "zfp_encode", layout.nblocks,
                   (flat, gpu.i64(flat.size), gpu.i64(layout.height), gpu.i64(layout.width),
                    gpu.i64(layout.nblocks), np.int32(layout.two_d), np.int32(rate), data))
        idx = cp.flatnonzero(~cp.isfinite(flat)).astype(cp.int64)
        obits = flat.view(cp.uint32)[idx]
        return cp.asarray(make_header(rate)), data, idx, obits, gpu.shape_array(shape)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        header, data, idx, obits, shape_arr = _split_payload(payload)
        rate = parse_header(cp.asnumpy(header))
        shape = gpu.host_shape(shape_arr)
        n = int(np.prod(shape, dtype=np.int64))
        layout = layout_of(shape)
        data = cp.ascontiguousarray(data, dtype=cp.uint32).reshape(-1)
        if data.size != data_words(layout, rate):
            raise ValueError(f"zfp: data has {data.size} words, shape {shape} at rate {rate} needs "
                             f"{data_words(layout, rate)}")
        idx = cp.ascontiguousarray(idx, dtype=cp.int64).reshape(-1)
        obits = cp.ascontiguousarray(obits, dtype=cp.uint32).reshape(-1)
        _check_outliers(idx, obits, n)
        y = cp.empty(n, dtype=cp.float32)
        bad = cp.zeros(1, dtype=cp.int32)
        gpu.launch(self.kernel_file, "zfp_decode", layout.nblocks,
                   (data, gpu.i64(n), gpu.i64(layout.height), gpu.i64(layout.width), gpu.i64(layout.nblocks),
                    np.int32(layout.two_d), np.int32(rate), y, bad))
        if int(bad[0]):
            raise ValueError("zfp: block exponent field out of range")
        if idx.size:
            y.view(cp.uint32)[idx] = obits
        return y.reshape(shape)
