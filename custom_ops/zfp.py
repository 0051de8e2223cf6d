"""``zfp``: fixed-rate lossy codec of the ZFP family (Lindstrom 2014; CSWAP+, FreeLunch) for float32 tensors.

Every block of the tensor costs exactly ``rate`` bits per value, so the payload size depends only on the
shape, and block ``b`` starts at bit ``b · budget`` of the stream (random access).

Blocks. Dimensions of size 1 are dropped first (NCHW with H = W = 1 becomes (N, C)). A tensor with >= 2
dimensions left is a stack of ``P`` planes (the product of the leading dimensions) of ``H × W`` (the last two),
cut into 4×4 blocks, plane-major, then block row, then block column; a tensor with fewer dimensions is cut
into 1-D blocks of 4 (flattened C order). Partial blocks are padded by repeating the last valid row / column
(element). ``budget`` = rate · 16 (2-D) or rate · 4 (1-D) bits.

Bitstream version 3 (v1's embedded bit-plane coder is gone: it coded one bit at a time and ran at ~0.07× copy
bandwidth; v3 is block-adaptive but has no serial bit loop). Per block (every backend, bit for bit):

1. Specials: NaN/±Inf are taken out of band (flat index + raw float32 bits, restored exactly on decode) and
   coded as 0.
2. Block floating point: ``emax`` = frexp exponent of the block's largest magnitude (|x| < 2**emax);
   ``q = trunc(x · 2**(26 − emax))`` (exact scaling, also for subnormals), so |q| < 2**26. An all-zero block
   stores exponent field 0 and nothing else (the rest of its budget is zero); otherwise the field is
   ``emax + 149`` (1..277), 9 bits.
3. Decorrelating transform: ZFP's integer lifting (``fwd_lift`` of zfp 0.5+), along each row, then along
   each column, int32 arithmetic (|c| <= 2**27, ``LCAP``): ``x += w; x >>= 1; w -= x; z += y; z >>= 1;
   y -= z; x += z; x >>= 1; z -= x; w += y; w >>= 1; y -= w; w += y >> 1; y -= w >> 1``. It is not exactly
   invertible (it drops low bits of q), far below any rate's quantisation step but at rates >= ~20 bits.
   Coefficients are reordered by total sequency (ZFP's 2-D permutation).
4. Groups. The sequency-ordered coefficients form groups of sizes ``GROUPS_2D`` = 1, 2, 3, 4, 6 (1-D: one
   group of 4). ``L_g`` = bit length of the group's largest |c|; ``M_g`` = max(L_g, L_g+1, ...) (suffix
   maximum, so M is non-increasing). Header after the exponent: ``e0 = min(LCAP − M_0, 3)`` (2 bits), then
   per later group ``d_g = min(D_{g−1} − M_g, 3)`` (2 bits), where ``D_0 = LCAP − e0``, ``D_g = D_{g−1} −
   d_g`` >= M_g: a declared bound on every |c| of group g of 2**D_g.
5. Step. ``avail`` = budget − 9 − header bits. ``s`` = the smallest s in 0..LCAP+1 with
   ``sum_g n_g · max(0, D_g − s + 1) <= avail``: every coefficient of group g gets ``w = max(0, D_g − s + 1)``
   bits at step 2**s. The ``avail − sum`` bits left over go one each, in sequency order, to the coefficients
   whose group has D_g >= s − 1 (when s > 0): those get w + 1 bits at step 2**(s − 1). The decoder computes
   the same widths and steps from the header.
6. Coefficients, in sequency order, each as ``w`` bits of two's complement of ``r = clamp((c + h) >> t,
   −2**(w−1), 2**(w−1) − 1)`` (t its step exponent, h = 2**t // 2: round half up), lowest bit first; w = 0
   writes nothing and decodes as 0. Decode: ``c = r · 2**t``, inverse lifting (``inv_lift``) in int32 (it
   cannot overflow: |c| <= 2**27 and the inverse's gain is < 15), ``y = q · 2**(emax − 26)`` in float64,
   saturated to ±FLT_MAX (finite in, finite out), rounded to float32 (RNE). Exact zeros come back as +0.0
   (−0.0 too); NaN/±Inf come back with their exact bits. Bits after the last coefficient are zero.

Payload (``payload_names``):
  header       uint8[8]: b"ZF", version 3, rate (3..32), 4 zero bytes
  data         uint32[ceil(nblocks · budget / 32)]; stream bit i is bit (i % 32) of word i // 32
  outlier_idx  int64[m]   ascending flat indices of NaN/±Inf elements
  outlier_bits uint32[m]  their raw float32 bits
  shape        int64[ndim]

The NumPy backend works on chunks of blocks, one vector op per coefficient position (and per bit of a field
when it writes the stream); the compiled CPU kernel (``_zfp_numba.py``) and the CUDA kernel
(``kernels/zfp.cu``, one thread per block) produce the same words.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cpu, gpu
from .base import Codec, Payload, register

VERSION = 3                     # 1: embedded bit planes (main until 2026-11); 2: the unmerged `fixedrate` branch
HEADER_BYTES = 8
MIN_RATE, MAX_RATE = 3, 32
PRECISION = 26                  # |q| < 2**PRECISION after block-floating-point scaling
LCAP = PRECISION + 1            # |transform coefficient| <= 2**LCAP (ZFP's lifting has gain <= 1 per axis)
EXP_BITS = 9                    # exponent field: 0 = all-zero block, else emax + EXP_BIAS
EXP_BIAS = 149                  # frexp exponents of finite float32 magnitudes span -148..128
FIELD_BITS = 2                  # e0 and every d_g: 0..3
GROUPS_2D = (1, 2, 3, 4, 6)     # group sizes over the sequency-ordered coefficients
GROUPS_1D = (4,)
_MAGIC = b"ZF"
_F32_MAX = float(np.finfo(np.float32).max)
# ZFP's 2-D coefficient order by total sequency; entry = col + 4 * row of the transformed block.
PERM_2D = np.array([0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15], dtype=np.intp)
PERM_1D = np.arange(4, dtype=np.intp)


def groups(two_d: bool) -> tuple[int, ...]:
    return GROUPS_2D if two_d else GROUPS_1D


def header_bits(two_d: bool) -> int:
    """Bits of a nonzero block's fixed fields: exponent, e0, one d_g per later group."""
    return EXP_BITS + FIELD_BITS * len(groups(two_d))


# The compiled block coder (same words) when numba is installed, else the vectorised NumPy coder below: its
# ahead-of-time compiled copy by default, or numba's parallel JIT kernels (custom_ops/cpu: backend_for("zfp")).
# Loaded on first use, not with the package: numba + LLVM add ~70 MiB of RSS on import and ~60 MiB more when
# the cached kernels load (measured), which the AOT copy does not (docs/notes/aotlossy.md).
# ONNXCOMP_ZFP_NUMBA=0 keeps the NumPy coder (no fixed cost, ~10x slower), as does ONNXCOMP_CODEC_BACKEND=numpy.
USE_NUMBA = importlib.util.find_spec("numba") is not None and os.environ.get("ONNXCOMP_ZFP_NUMBA", "1") != "0"


def _compiled() -> Any:
    """The compiled coder (``encode`` / ``decode`` of ``_zfp_numba.py``) the active backend runs, or None
    (NumPy: numba missing, switched off, or its AOT build failed)."""
    from . import cpu

    return cpu.kernels("zfp") if USE_NUMBA else None


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
    """The rate stored in a zfp header; ValueError if it is not a zfp v3 header."""
    h = np.asarray(header, dtype=np.uint8).reshape(-1)
    if h.size != HEADER_BYTES or bytes(h[:2]) != _MAGIC:
        raise ValueError("zfp: payload header is not a zfp header")
    if int(h[2]) != VERSION:
        raise ValueError(f"zfp: unsupported payload version {int(h[2])} (this build reads version {VERSION}; "
                         "payloads of other versions must be re-encoded)")
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
    # math.prod, not np.prod: np.prod costs microseconds per call on a small tuple, and every encode / decode
    # calls this (the codec's fixed cost per call, measured in `docs/notes/zfpapi.md`)
    dims = [int(d) for d in shape]
    n = math.prod(dims)
    dims = [d for d in dims if d != 1]
    if n == 0:
        return Layout(0, 0, 0, 4, 4) if len(dims) >= 2 else Layout(0, 1, 0, 1, 4)
    if len(dims) >= 2:
        return Layout(math.prod(dims[:-2]), dims[-2], dims[-1], 4, 4)
    return Layout(1, 1, n, 1, 4)


def budget_bits(layout: Layout, rate: int) -> int:
    return rate * layout.block_size


def data_words(layout: Layout, rate: int) -> int:
    return -(-layout.nblocks * budget_bits(layout, rate) // 32)


# -- integer transform ----------------------------------------------------------------------------------------
def _fwd4(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    """ZFP's forward lifting of (x, y, z, w) (integer arrays; arithmetic shifts)."""
    x = x + w; x >>= 1; w = w - x  # noqa: E702
    z = z + y; z >>= 1; y = y - z  # noqa: E702
    x = x + z; x >>= 1; z = z - x  # noqa: E702
    w = w + y; w >>= 1; y = y - w  # noqa: E702
    w = w + (y >> 1); y = y - (w >> 1)  # noqa: E702
    return x, y, z, w


def _inv4(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    """ZFP's inverse lifting."""
    y = y + (w >> 1); w = w - (y >> 1)  # noqa: E702
    y = y + w; w = (w << 1) - y  # noqa: E702
    z = z + x; x = (x << 1) - z  # noqa: E702
    y = y + z; z = (z << 1) - y  # noqa: E702
    w = w + x; x = (x << 1) - w  # noqa: E702
    return x, y, z, w


def _apply(f: Any, c: np.ndarray, two_d: bool, rows_first: bool) -> np.ndarray:
    c = c.copy()
    if not two_d:
        c[:, 0], c[:, 1], c[:, 2], c[:, 3] = f(c[:, 0], c[:, 1], c[:, 2], c[:, 3])
        return c
    rows = [(4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3) for r in range(4)]
    cols = [(k, k + 4, k + 8, k + 12) for k in range(4)]
    for i0, i1, i2, i3 in (rows + cols if rows_first else cols + rows):
        c[:, i0], c[:, i1], c[:, i2], c[:, i3] = f(c[:, i0], c[:, i1], c[:, i2], c[:, i3])
    return c


def forward_transform(q: np.ndarray, two_d: bool) -> np.ndarray:
    """int [B, 16] (col + 4·row) or [B, 4] blocks -> transformed coefficients, same layout (rows, then columns)."""
    return _apply(_fwd4, q, two_d, rows_first=True)


def inverse_transform(c: np.ndarray, two_d: bool) -> np.ndarray:
    """Columns, then rows: undoes ``forward_transform`` up to the low bits the forward lifting drops."""
    return _apply(_inv4, c, two_d, rows_first=False)


def bit_length(a: np.ndarray) -> np.ndarray:
    """Bit length of non-negative integers (< 2**52), 0 for 0."""
    return np.frexp(np.asarray(a, dtype=np.float64))[1].astype(np.int64)


def declared_bounds(c: np.ndarray, two_d: bool) -> tuple[np.ndarray, np.ndarray]:
    """(fields [B, G], D [B, G]) of sequency-ordered coefficients c [B, size]: the header fields e0, d_1..
    and the declared bit bounds D_g (module doc, step 4)."""
    sizes = groups(two_d)
    ends = np.cumsum(sizes)
    mag = np.abs(c)
    L = np.stack([bit_length(mag[:, e - n:e].max(axis=1)) for n, e in zip(sizes, ends)], axis=1)
    M = np.maximum.accumulate(L[:, ::-1], axis=1)[:, ::-1]
    cap = (1 << FIELD_BITS) - 1
    fields = np.empty_like(M)
    D = np.empty_like(M)
    fields[:, 0] = np.minimum(LCAP - M[:, 0], cap)
    D[:, 0] = LCAP - fields[:, 0]
    for g in range(1, len(sizes)):
        fields[:, g] = np.minimum(D[:, g - 1] - M[:, g], cap)
        D[:, g] = D[:, g - 1] - fields[:, g]
    return fields, D


def bounds_from_fields(fields: np.ndarray) -> np.ndarray:
    """D [B, G] from the header fields [B, G]."""
    D = np.empty_like(fields)
    D[:, 0] = LCAP - fields[:, 0]
    for g in range(1, fields.shape[1]):
        D[:, g] = D[:, g - 1] - fields[:, g]
    return D


def widths_and_steps(D: np.ndarray, two_d: bool, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(w, t) int64 [B, size]: bits and step exponent of every sequency-ordered coefficient (module doc, 5)."""
    sizes = np.array(groups(two_d), dtype=np.int64)
    avail = budget - header_bits(two_d)
    svals = np.arange(LCAP + 2, dtype=np.int64)
    tot = (np.maximum(0, D[:, :, None] - svals + 1) * sizes[:, None]).sum(axis=1)  # [B, LCAP + 2]
    s = (tot > avail).sum(axis=1)  # tot falls with s: the count of too-expensive steps is the first cheap one
    of = np.repeat(np.arange(len(sizes)), sizes)
    Dc = D[:, of]
    w = np.maximum(0, Dc - s[:, None] + 1)
    left = avail - w.sum(axis=1)
    eligible = (Dc >= s[:, None] - 1) & (s[:, None] > 0)
    up = eligible & (np.cumsum(eligible, axis=1) <= left[:, None])
    return w + up, s[:, None] - up


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
def _put_bits(bits: np.ndarray, pos: np.ndarray, val: np.ndarray, width: np.ndarray, sink: int) -> None:
    """bits[b, pos[b] + k] = bit k of val[b] for k < width[b] (column ``sink`` takes the rest)."""
    rows = np.arange(bits.shape[0])
    for k in range(int(width.max(initial=0))):
        bits[rows, np.where(k < width, pos + k, sink)] = (val >> k) & 1


def _get_bits(padded: np.ndarray, pos: np.ndarray, width: np.ndarray) -> np.ndarray:
    rows = np.arange(padded.shape[0])
    out = np.zeros(padded.shape[0], dtype=np.int64)
    for k in range(int(width.max(initial=0))):
        out |= np.where(k < width, padded[rows, np.minimum(pos + k, padded.shape[1] - 1)], 0).astype(np.int64) << k
    return out


def _encode_chunk(v: np.ndarray, two_d: bool, budget: int) -> np.ndarray:
    """Stream bits uint8 [B, budget] of float32 blocks v [B, size] (specials already zeroed)."""
    nb, size = v.shape
    perm = PERM_2D if two_d else PERM_1D
    amax = np.abs(v).max(axis=1)
    nonzero = amax > 0
    emax = np.frexp(amax)[1].astype(np.int64)
    q = np.trunc(np.ldexp(v.astype(np.float64), (PRECISION - emax)[:, None])).astype(np.int64)
    c = forward_transform(q, two_d)[:, perm]
    fields, D = declared_bounds(c, two_d)
    w, t = widths_and_steps(D, two_d, budget)
    r = (c + ((1 << t) >> 1)) >> t
    r = np.clip(r, -(1 << np.maximum(w - 1, 0)), (1 << np.maximum(w - 1, 0)) - 1)
    bits = np.zeros((nb, budget + 1), dtype=np.uint8)  # column `budget`: sink for unused writes
    pos = np.zeros(nb, dtype=np.int64)
    fixed = [(np.where(nonzero, emax + EXP_BIAS, 0), EXP_BITS)] + [(fields[:, g], FIELD_BITS)
                                                                  for g in range(fields.shape[1])]
    for val, width in fixed:
        _put_bits(bits, pos, val, np.where(nonzero, width, 0), budget)
        pos += width
    for i in range(size):
        wi = np.where(nonzero, w[:, i], 0)
        _put_bits(bits, pos, r[:, i] & ((1 << wi) - 1), wi, budget)
        pos += wi
    return bits[:, :budget]


def _decode_chunk(bits: np.ndarray, two_d: bool, budget: int) -> np.ndarray:
    """float32 [B, size] blocks from stream bits uint8 [B, budget]."""
    nb = bits.shape[0]
    size = 16 if two_d else 4
    perm = PERM_2D if two_d else PERM_1D
    padded = np.zeros((nb, budget + 1), dtype=np.uint8)  # column `budget` reads as 0
    padded[:, :budget] = bits
    pos = np.zeros(nb, dtype=np.int64)
    efield = _get_bits(padded, pos, np.full(nb, EXP_BITS))
    if efield.size and int(efield.max()) > 128 + EXP_BIAS:
        raise ValueError(f"zfp: block exponent field {int(efield.max())} out of range")
    nonzero = efield > 0
    emax = efield - EXP_BIAS
    pos += EXP_BITS
    ng = len(groups(two_d))
    fields = np.empty((nb, ng), dtype=np.int64)
    for g in range(ng):
        fields[:, g] = _get_bits(padded, pos, np.full(nb, FIELD_BITS))
        pos += FIELD_BITS
    w, t = widths_and_steps(bounds_from_fields(fields), two_d, budget)
    c = np.zeros((nb, size), dtype=np.int64)
    for i in range(size):
        u = _get_bits(padded, pos, w[:, i])
        pos += w[:, i]
        sign = np.where(w[:, i] > 0, 1 << np.maximum(w[:, i] - 1, 0), 0)
        c[:, perm[i]] = ((u ^ sign) - sign) << t[:, i]
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
        layout = layout_of(x.shape)
        compiled = _compiled()
        if compiled is not None:
            # the kernel writes every word and reports NaN/±Inf itself: no pass over x here unless it finds some
            words = np.empty(data_words(layout, rate), dtype=np.uint32)
            args = (flat.size, layout.height, layout.width, layout.nblocks, layout.two_d, rate, PRECISION, EXP_BITS,
                    EXP_BIAS, words)
            nchunks = compiled.chunks(layout.nblocks)
            if all(cpu.run_chunks(compiled, compiled.encode, nchunks, flat, *args)):
                return make_header(rate), words, np.zeros(0, np.int64), np.zeros(0, np.uint32), shape
        special = ~np.isfinite(flat)
        idx = np.flatnonzero(special).astype(np.int64)
        obits = flat.view(np.uint32)[idx]
        if idx.size:
            flat = np.where(special, np.float32(0), flat)
        if compiled is not None:
            cpu.run_chunks(compiled, compiled.encode, nchunks, flat, *args)
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
        n = math.prod(shape)
        layout = layout_of(shape)
        data = np.ascontiguousarray(data, dtype=np.uint32).reshape(-1)
        if data.size != data_words(layout, rate):
            raise ValueError(f"zfp: data has {data.size} words, shape {shape} at rate {rate} needs "
                             f"{data_words(layout, rate)}")
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        obits = np.asarray(obits, dtype=np.uint32).reshape(-1)
        _check_outliers(idx, obits, n)
        y = np.empty(n, dtype=np.float32)
        if (compiled := _compiled()) is not None:
            if not all(cpu.run_chunks(compiled, compiled.decode, compiled.chunks(layout.nblocks), data, n,
                                      layout.height, layout.width, layout.nblocks, layout.two_d, rate, PRECISION,
                                      EXP_BITS, EXP_BIAS, y)):
                raise ValueError("zfp: block exponent field out of range")
            if idx.size:  # an empty fancy-index assignment still costs microseconds
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
