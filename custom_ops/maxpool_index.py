"""Gist's Binarize for MaxPool: store each argmax as its offset inside the pooling window.

ORT's MaxPool second output holds int64 absolute flat NCHW indices into the pool input,
``((n*C + c)*H + h)*W + w`` (ties -> first element in window order). The window of output (oh, ow) starts at
``(oh*sh - pad_top, ow*sw - pad_left)`` and covers ``(start_h + i*dh, start_w + j*dw)``; the index is stored
as ``k = i*kw + j`` in ``b = max(1, ceil(log2(kh*kw)))`` bits and decoded exactly back to the int64 index.

Packing (CPU and GPU alike): a little-endian bit stream -- stream bit t is bit (t % 8) of byte t // 8 --
in which element e of the index tensor (flat NCHW order) occupies bits [e*b, (e+1)*b), least significant bit
first; the unused bits of the last byte are 0. b = 1 is exactly ``np.packbits(..., bitorder="little")``.
Payload: ``offsets`` uint8[ceil(n*b/8)], ``shape`` int64[4] (the index tensor's shape).

Params (ONNX MaxPool attributes, fixed when the graph is rewritten): ``input_shape`` (N, C, H, W),
``kernel_shape``, ``strides``, ``pads`` (h_begin, w_begin, h_end, w_end), ``dilations``, ``ceil_mode``,
``storage_order`` (must be 0), ``auto_pad``. Output sizes follow ORT 1.19's runtime formula, which in
ceil_mode can exceed ONNX shape inference by one and create windows wholly in the padding; ORT gives those
the index ``plane*H*W - W - 1``, which round-trips too (see ``empty_windows``). Encode raises ValueError
for any index outside its window (or a tensor shape that does not match the params), e.g. ORT's sentinel
for a window holding only NaN/-inf: a payload is never silently wrong.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import cpu, gpu
from .base import Codec, Payload, register

_CHUNK = 1 << 16  # elements per CPU block: keeps the int temporaries in L2 (~4x faster than whole-array ops)


@dataclass(frozen=True)
class PoolGeometry:
    N: int
    C: int
    H: int
    W: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int  # pad top (h_begin)
    pl: int  # pad left (w_begin)
    pb: int
    pr: int
    dh: int
    dw: int
    ceil_mode: int
    OH: int
    OW: int

    @property
    def bits(self) -> int:
        return offset_bits(self.kh * self.kw)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.C, self.OH, self.OW)


def offset_bits(window: int) -> int:
    """Bits per stored offset for a window of ``window`` elements: ceil(log2(window)), at least 1."""
    return max(1, math.ceil(math.log2(window))) if window > 1 else 1


def _out_size(in_size: int, k: int, s: int, d: int, pads: int, ceil_mode: int) -> int:
    # ORT 1.19 pool_attributes.h ComputeOutputSize (float division, truncation toward zero).
    num = float(in_size + pads - d * (k - 1) - 1) / s
    return int(math.ceil(num) if ceil_mode else num) + 1


def geometry(
    input_shape: Sequence[int],
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: int = 0,
    storage_order: int = 0,
    auto_pad: str = "NOTSET",
) -> PoolGeometry:
    """Resolve MaxPool attributes (ONNX defaults, ORT's auto_pad rules) into a PoolGeometry."""
    if int(storage_order) != 0:
        raise ValueError("maxpool_index: storage_order=1 (column-major indices) is not supported")
    if len(input_shape) != 4 or len(kernel_shape) != 2:
        raise ValueError(f"maxpool_index: 2-D pooling over NCHW only (input_shape={input_shape}, "
                         f"kernel_shape={kernel_shape})")
    N, C, H, W = (int(v) for v in input_shape)
    kh, kw = (int(v) for v in kernel_shape)
    sh, sw = (int(v) for v in (strides or (1, 1)))
    dh, dw = (int(v) for v in (dilations or (1, 1)))
    pt, pl, pb, pr = (int(v) for v in (pads or (0, 0, 0, 0)))
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0:
        raise ValueError("maxpool_index: kernel, strides, dilations must be >= 1 and pads >= 0")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("", "NOTSET"):
        OH = _out_size(H, kh, sh, dh, pt + pb, ceil_mode)
        OW = _out_size(W, kw, sw, dw, pl + pr, ceil_mode)
    elif auto_pad == "VALID":
        pt = pl = pb = pr = 0
        OH = _out_size(H, kh, sh, dh, 0, ceil_mode)
        OW = _out_size(W, kw, sw, dw, 0, ceil_mode)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        def same(in_size: int, k: int, s: int, d: int) -> tuple[int, int, int]:
            # ORT: pad_needed uses the undilated kernel; SAME_LOWER puts the odd pad at the head.
            need = ((in_size + s - 1) // s - 1) * s + k - in_size
            head = (need + 1) // 2 if auto_pad == "SAME_LOWER" else need // 2
            return head, need - head, _out_size(in_size, k, s, d, need, ceil_mode)

        pt, pb, OH = same(H, kh, sh, dh)
        pl, pr, OW = same(W, kw, sw, dw)
    else:
        raise ValueError(f"maxpool_index: unknown auto_pad {auto_pad!r}")
    if kh * kw > 1 << 32:
        raise ValueError("maxpool_index: pooling window too large")
    return PoolGeometry(N, C, H, W, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, int(ceil_mode), OH, OW)


@functools.lru_cache(maxsize=1024)
def _geometry_of(items: tuple[tuple[str, Any], ...]) -> PoolGeometry:
    return geometry(**dict(items))


def cached_geometry(params: dict[str, Any]) -> PoolGeometry:
    """geometry(**params), computed once per distinct params: the ops call it on every step with the
    same node attributes, and it cost ~0.1 ms a call on the loaded 2-core machine."""
    return _geometry_of(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items())))


@dataclass(frozen=True)
class _Tables:
    """Per-geometry lookup tables of the NumPy fast path (``fast_tables``)."""

    rows: int                 # planes per chunk
    base: np.ndarray          # int64 (rows, OH*OW): r*H*W + window origin, the index of tap 0 of plane r
    origin1: np.ndarray       # int64 (OH*OW,): window origin (tap 0's flat index in plane 0) - 1
    lut: np.ndarray           # uint8: offset k of flat distance t - 1 from the window origin, INVALID elsewhere
    taps: np.ndarray          # int64 (kh*kw,): flat distance of tap k from the window origin
    edge: np.ndarray          # intp: positions whose window is not wholly inside the input (checked tap by tap)
    edge_taps: np.ndarray     # uint64 (edge.size,): bit k set iff tap k of that window lies inside the input
    edge_out: np.ndarray      # (edge.size,) in the narrowest unsigned dtype of ``window`` bits: ~edge_taps
    empty: np.ndarray         # intp: positions whose window has no tap inside the input (ORT's sentinel)


_INVALID = 255  # lut entry of a distance that is no tap of the window


@functools.lru_cache(maxsize=256)
def fast_tables(g: PoolGeometry) -> _Tables | None:
    """Tables for the NumPy path that maps each index to its offset by one table lookup (no division), or None
    where that path does not apply: a dilated window wider than the input row (then a flat distance does not
    determine the tap) or windows of more than 64 taps (bit masks of ``edge_taps``)."""
    window = g.kh * g.kw
    span_h, span_w = (g.kh - 1) * g.dh + 1, (g.kw - 1) * g.dw + 1
    if window > 64 or span_w > g.W:
        return None
    hs = np.arange(g.OH, dtype=np.int64) * g.sh - g.pt
    ws = np.arange(g.OW, dtype=np.int64) * g.sw - g.pl
    origin = (hs[:, None] * g.W + ws[None, :]).reshape(-1)
    ohw, hw = g.OH * g.OW, g.H * g.W
    rows = max(1, _CHUNK // max(ohw, 1))
    base = (np.arange(rows, dtype=np.int64) * hw)[:, None] + origin[None, :]
    k = np.arange(window, dtype=np.int64)
    taps = (k // g.kw) * g.dh * g.W + (k % g.kw) * g.dw
    lut = np.full((span_h - 1) * g.W + span_w + 2, _INVALID, dtype=np.uint8)
    lut[taps + 1] = k  # entry 0 and the last one stay INVALID: out-of-range distances are clipped onto them
    ih = (hs[:, None] + (k // g.kw)[None, :] * g.dh)  # (OH, window) tap rows
    iw = (ws[:, None] + (k % g.kw)[None, :] * g.dw)   # (OW, window) tap columns
    inside = (((ih >= 0) & (ih < g.H))[:, None, :] & ((iw >= 0) & (iw < g.W))[None, :, :]).reshape(ohw, window)
    edge = np.flatnonzero(~inside.all(axis=1))
    edge_taps = (inside[edge].astype(np.uint64) << k.astype(np.uint64)).sum(axis=1, dtype=np.uint64)
    narrow = next(dt for dt in map(np.dtype, (np.uint8, np.uint16, np.uint32, np.uint64)) if dt.itemsize * 8 >= window)
    edge_out = (~edge_taps & np.uint64((1 << window) - 1)).astype(narrow)
    return _Tables(rows, base, origin - 1, lut, taps, edge, edge_taps, edge_out, np.flatnonzero(empty_windows(g)))


# -- b-bit packing (NumPy) --------------------------------------------------------------------------------
# All paths do whole-word shifts on little-endian views ('<u2'/'<u4'/'<u8' of the byte array), so the
# layout is the same on any host; column-wise uint8 ops were 5x slower.
_WORD = {2: "<u4", 4: "<u2"}  # b divides 8: one word holds the 8/b values of one packed byte
# Block sizes of the packing and decoding loops: their temporaries stay under 128 KiB, below the mmap threshold
# the project measures with (MALLOC_MMAP_THRESHOLD_=131072), so they come from the heap, not fresh pages.
_PACK_BYTES = 1 << 16  # word bytes per block in pack_bits
_TAKE_BYTES = 1 << 13  # payload bytes per np.take in _decode_lut: 64 KiB of widened (intp) indices


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned ``values`` (< 2**bits) into the little-endian bit stream described in the module doc.

    uint8 ``values`` already padded to whole words (``_encode_lut``'s buffer) are read in place, and the words
    are packed in blocks of ``_PACK_BYTES``: inside a training step the encoder's temporaries add to the step's
    peak (under ORT's defaults the first MaxPool-index encoder's were its high-water mark), so beyond the
    values and the packed bytes this holds a few hundred KiB, not two more copies of the values."""
    values = np.asarray(values).reshape(-1)
    n = values.size
    nbytes = (n * bits + 7) // 8
    if bits == 8:
        return values.astype(np.uint8)
    if bits == 1:
        return np.packbits(values.astype(bool), bitorder="little")
    if bits > 8:  # windows of more than 256 elements: rare, go through a bit matrix
        v = values.astype(np.uint64)
        bitmat = ((v[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
        return np.packbits(bitmat.reshape(-1), bitorder="little")
    per_word = 8 // bits if bits in _WORD else 8  # values per word
    words = -(-n // per_word)
    if values.dtype == np.uint8 and n == words * per_word and values.flags.c_contiguous:
        buf = values
    else:
        buf = np.zeros(words * per_word, dtype=np.uint8)
        buf[:n] = values
    if bits in _WORD:
        v = buf.view(_WORD[bits])
        out = np.empty(words, dtype=np.uint8)
        block = _PACK_BYTES // v.itemsize
        for w0 in range(0, words, block):
            vc = v[w0:w0 + block]
            acc = vc >> vc.dtype.type(8 - bits)
            for j in range(2, per_word):  # value j sits at bit 8j; bring it to bit j*bits (no overlap: k < 2**bits)
                acc |= vc >> vc.dtype.type(j * (8 - bits))
            # the low byte, as astype(uint8): no extra pass
            np.bitwise_or(vc, acc, out=out[w0:w0 + block], casting="unsafe")
        return out[:nbytes]
    # b in {3, 5, 6, 7}: 8 values -> b bytes through a uint64 per group; masks drop the shifted neighbours.
    v = buf.view("<u8")
    mask = (1 << bits) - 1
    out = np.empty((words, bits), dtype=np.uint8)
    block = _PACK_BYTES // v.itemsize
    for w0 in range(0, words, block):
        vc = v[w0:w0 + block]
        acc = vc & np.uint64(mask)
        for j in range(1, 8):
            acc |= (vc >> np.uint64(j * (8 - bits))) & np.uint64(mask << (j * bits))
        out[w0:w0 + block] = acc.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)[:, :bits]
    return out.reshape(-1)[:nbytes]


def offsets_outside_window(packed: np.ndarray, bits: int, n: int, window: int) -> bool:
    """Whether any of the first ``n`` b-bit offsets (b divides 8) in ``packed`` is ``>= window`` -- what
    ``unpack_bits(packed, bits, n).max() >= window`` says, without unpacking: no offset can be when 2**b <=
    window (2x2 windows, 2 bits); else the largest of each of a byte's 8/b fields over blocks of whole bytes
    (uint8 shifts and masks), and the last byte's first ``n mod (8 // b)`` offsets."""
    if 8 % bits:
        raise ValueError(f"offsets_outside_window: {bits}-bit offsets do not divide a byte")
    if (1 << bits) <= window:
        return False
    per, mask = 8 // bits, np.uint8((1 << bits) - 1)
    packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
    full = n // per
    for c0 in range(0, full, _CHUNK):
        blk = packed[c0:min(full, c0 + _CHUNK)]
        for j in range(per):
            if int(((blk >> np.uint8(j * bits)) & mask).max()) >= window:
                return True
    rest = n - full * per
    last = int(packed[full]) if rest else 0
    return any((last >> (j * bits)) & ((1 << bits) - 1) >= window for j in range(rest))


def unpack_bits(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Inverse of pack_bits: ``n`` values (uint8 for bits <= 8, else uint64)."""
    packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
    if packed.size != (n * bits + 7) // 8:
        raise ValueError(f"maxpool_index: {packed.size} bytes cannot hold {n} offsets of {bits} bits")
    if bits == 8:
        return packed.copy()
    if bits == 1:
        return np.unpackbits(packed, count=n, bitorder="little")
    if bits > 8:
        bitmat = np.unpackbits(packed, count=n * bits, bitorder="little").reshape(n, bits).astype(np.uint64)
        return (bitmat << np.arange(bits, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
    mask = (1 << bits) - 1
    if bits in _WORD:
        per_word = 8 // bits
        v = packed.astype(_WORD[bits])
        acc = v.copy()
        for j in range(1, per_word):  # value j at bit j*bits -> byte j of the word
            acc |= v << v.dtype.type(j * (8 - bits))
        acc &= v.dtype.type(int.from_bytes(bytes([mask] * per_word), "little"))
        return acc.view(np.uint8)[:n]
    words = -(-n // 8)
    buf = np.zeros((words, 8), dtype=np.uint8)
    flat = np.zeros(words * bits, dtype=np.uint8)
    flat[: packed.size] = packed
    buf[:, :bits] = flat.reshape(words, bits)
    v = buf.view("<u8").reshape(words)
    acc = v & np.uint64(mask)
    for j in range(1, 8):
        acc |= (v << np.uint64(j * (8 - bits))) & np.uint64(mask << (8 * j))
    return acc.astype("<u8").view(np.uint8)[:n]


def _encode_lut(idx: np.ndarray, g: PoolGeometry, t: _Tables, kern: Any = None) -> np.ndarray:
    """Packed offsets of int64 indices ``idx`` (planes, OH*OW) through ``t.lut``: per chunk of planes one
    subtraction of the tap-0 index, one table lookup (or, with ``kern`` = ``cpu.kernels("maxpool")``, the
    compiled kernel doing both in one pass: same offsets); then checks that need no pass over the int64 data
    except on the (few) windows that overhang the input."""
    P, ohw = idx.shape
    hw = g.H * g.W
    per = 8 // g.bits if g.bits in _WORD else 8
    n = P * ohw
    kbuf = np.empty(-(-n // per) * per, dtype=np.uint8)  # padded as pack_bits wants it: no copy there
    kbuf[n:] = 0
    k = kbuf[:n].reshape(P, ohw)
    if kern is not None:
        kmax = kern.window_offsets(idx, kbuf, hw, t.origin1, t.lut)
    else:
        d = np.empty((min(t.rows, P), ohw), dtype=np.int64)
        for p0 in range(0, P, t.rows):
            p1 = min(P, p0 + t.rows)
            dd = d[:p1 - p0]
            np.subtract(idx[p0:p1], t.base[:p1 - p0], out=dd)
            dd -= p0 * hw - 1  # distance from the window origin, + 1: lut[0] is INVALID for negative ones
            np.take(t.lut, dd, out=k[p0:p1], mode="clip")
        kmax = int(k.max()) if n else 0
    window = g.kh * g.kw
    if not t.empty.size and kmax < window:
        # Every distance is a tap of its window's bounding box; on overhanging windows the tap must also lie
        # inside the input: one gather of their offsets and one shift through the outside-taps mask (an
        # offset >= window cannot occur here). ~3x cheaper than the general check below, which also handles
        # ORT's empty-window sentinel and finds the first bad element for the error message.
        one = t.edge_out.dtype.type(1)
        if not t.edge.size or not np.any((t.edge_out[None, :] >> np.take(k, t.edge, axis=1)) & one):
            return pack_bits(kbuf, g.bits)[:(n * g.bits + 7) // 8]
    bad = k >= window if kmax >= window else None  # some distance is no tap of its window
    if t.edge.size:  # overhanging windows: the tap must also lie inside the input
        ke = k[:, t.edge]
        ke[ke >= window] = 0  # flagged in ``bad`` already
        off = (t.edge_taps[None, :] >> ke.astype(np.uint64)) & np.uint64(1) == 0
        empty_cols = np.isin(t.edge, t.empty)
        if t.empty.size:  # no tap inside: ORT stores its sentinel, the payload offset 0
            sentinel = (np.arange(P, dtype=np.int64) * hw - g.W - 1)[:, None]
            off[:, empty_cols] = idx[:, t.edge[empty_cols]] != sentinel
            k[:, t.empty] = 0
        if bad is not None:
            bad[:, t.edge] = off | (bad[:, t.edge] & ~empty_cols[None, :])
        elif off.any():
            bad = np.zeros(k.shape, dtype=bool)
            bad[:, t.edge] = off
    if bad is not None and bad.any():
        e = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValueError(f"maxpool_index: index {int(idx.reshape(-1)[e])} at flat position {e} is not "
                         f"inside its pooling window (wrong params or not MaxPool indices)")
    return pack_bits(kbuf, g.bits)[:(n * g.bits + 7) // 8]


def _decode_lut(packed: np.ndarray, g: PoolGeometry, t: _Tables) -> np.ndarray:
    """int64 indices (planes, OH*OW) from a payload whose offsets ``unpack_bits`` has checked. Offsets of b
    bits, b | 8: one lookup per payload byte gives the tap distances of its 8/b offsets (a (256, 8/b) table),
    then the tap-0 index is added; other widths look offsets up one by one."""
    P, ohw = g.N * g.C, g.OH * g.OW
    hw, n = g.H * g.W, P * ohw
    per = 8 // g.bits if 8 % g.bits == 0 else 1
    packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
    out = np.empty(packed.size * per if per > 1 else n, dtype=np.int64)
    if per > 1:
        mask = (1 << g.bits) - 1
        code = np.arange(256, dtype=np.int64)
        fields = np.minimum((code[:, None] >> (np.arange(per) * g.bits)[None, :]) & mask, g.kh * g.kw - 1)
        table, rows = t.taps[fields], out.reshape(-1, per)
        # In blocks: np.take widens its uint8 indices to intp first (8 bytes per payload byte, 2x the offsets
        # of a 2-bit payload), a temporary beside the int64 output when it runs whole.
        for c0 in range(0, packed.size, _TAKE_BYTES):
            c1 = min(packed.size, c0 + _TAKE_BYTES)
            np.take(table, packed[c0:c1], axis=0, out=rows[c0:c1], mode="clip")  # clip: no buffered out
    else:
        np.take(t.taps, unpack_bits(packed, g.bits, n), out=out, mode="clip")
    grid = out[:n].reshape(P, ohw)
    for p0 in range(0, P, t.rows):
        blk = grid[p0:p0 + t.rows]
        blk += t.base[:blk.shape[0]]
        blk += p0 * hw
    if t.empty.size:
        grid[:, t.empty] = (np.arange(P, dtype=np.int64) * hw - g.W - 1)[:, None]
    return grid


def reference_indices(x: np.ndarray, **params: Any) -> np.ndarray:
    """MaxPool indices as ORT computes them (first maximum in window order wins), for tests and samples."""
    g = geometry(x.shape, **params)
    xf = np.asarray(x, dtype=np.float32).reshape(g.N * g.C, g.H, g.W)
    best = np.full((g.N * g.C, g.OH, g.OW), np.finfo(np.float32).min, dtype=np.float32)
    arg = np.full(best.shape, -g.W - 1, dtype=np.int64)  # ORT's h_index = w_index = -1
    hs = np.arange(g.OH) * g.sh - g.pt
    ws = np.arange(g.OW) * g.sw - g.pl
    for i in range(g.kh):
        h = hs + i * g.dh
        for j in range(g.kw):
            w = ws + j * g.dw
            ok = ((h >= 0) & (h < g.H))[:, None] & ((w >= 0) & (w < g.W))[None, :]
            vals = xf[:, np.clip(h, 0, g.H - 1)][:, :, np.clip(w, 0, g.W - 1)]
            take = ok[None] & (vals > best)  # ORT: strict >, starting from float lowest
            best = np.where(take, vals, best)
            arg = np.where(take, (np.clip(h, 0, g.H - 1)[:, None] * g.W + np.clip(w, 0, g.W - 1)[None, :])[None], arg)
    base = (np.arange(g.N * g.C, dtype=np.int64) * g.H * g.W)[:, None, None]
    return (arg + base).reshape(g.out_shape)


def _taps_empty(start: np.ndarray, k: int, d: int, size: int) -> np.ndarray:
    """Per window origin: True if none of its k taps start + i*d falls inside [0, size)."""
    i0 = np.where(start >= 0, 0, (-start + d - 1) // d)
    return (start >= size) | (i0 >= k) | (start + i0 * d >= size)


def empty_windows(g: PoolGeometry) -> np.ndarray:
    """(OH*OW,) bool: windows with no tap inside the input (ceil_mode / dilation overhang).

    ORT 1.19 still emits an index there: the sentinel ``plane*H*W - W - 1`` (its h_index = w_index = -1).
    The codec stores offset 0 for them and restores the sentinel from the geometry alone.
    """
    eh = _taps_empty(np.arange(g.OH, dtype=np.int64) * g.sh - g.pt, g.kh, g.dh, g.H)
    ew = _taps_empty(np.arange(g.OW, dtype=np.int64) * g.sw - g.pl, g.kw, g.dw, g.W)
    return (eh[:, None] | ew[None, :]).reshape(-1)


@register
class MaxPoolIndex(Codec):
    name = "maxpool_index"
    lossless = True
    input_dtype = "int64"
    output_dtype = "int64"
    payload_names = ("offsets", "shape")
    payload_dtypes = ("uint8", "int64")
    kernel_file = "maxpool_index.cu"

    def validate_params(self, **params: Any) -> None:
        try:
            geometry(**params)  # what encode/decode resolve first
        except TypeError as exc:  # a missing or unknown MaxPool attribute
            raise ValueError(f"maxpool_index: bad params {sorted(params)}: {exc}") from None

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        """``shape``: the index tensor's; ``stats`` must carry ``kernel_shape``."""
        kh, kw = (int(v) for v in stats["kernel_shape"])
        n = int(np.prod(shape, dtype=np.int64))
        return (n * offset_bits(kh * kw) + 7) // 8 + 8 * len(shape)

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """(index tensor, params) cases for generic codec tests, from reference_indices on random inputs."""
        configs = [
            ((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
            ((1, 2, 7, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
            ((2, 1, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1], ceil_mode=1)),
            ((1, 3, 11, 10), dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 2], pads=[0, 1, 1, 0])),
            ((1, 1, 20, 20), dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2])),  # b = 5
            ((1, 2, 24, 24), dict(kernel_shape=[17, 17], strides=[4, 4])),  # b = 9 (wide path)
            ((0, 3, 6, 6), dict(kernel_shape=[2, 2], strides=[2, 2])),
        ]
        out = []
        for shape, p in configs:
            x = rng.integers(-3, 4, size=shape).astype(np.float32)  # small integers: plenty of ties
            out.append((reference_indices(x, **p), dict(input_shape=list(shape), **p)))
        return out

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        g = cached_geometry(params)
        idx = np.asarray(x)
        if idx.dtype != np.int64:
            raise ValueError(f"maxpool_index: expected int64 indices, got {idx.dtype}")
        if tuple(idx.shape) != g.out_shape:
            raise ValueError(f"maxpool_index: index tensor shape {idx.shape} != {g.out_shape} implied by params")
        t = fast_tables(g)
        # The table path (NumPy, or its lookup compiled: cpu/maxpool.py, NUMBA_WHEN_LOADED) wherever it applies;
        # cpu/bits.py's compiled encoder (2.5x slower than the NumPy table path) only for the other geometries.
        if t is None and (kern := cpu.kernels("bits")) is not None:
            packed, e = kern.maxpool_encode(idx, g)
            if e >= 0:
                raise ValueError(f"maxpool_index: index {int(idx.reshape(-1)[e])} at flat position {e} is not "
                                 f"inside its pooling window (wrong params or not MaxPool indices)")
            return packed, np.asarray(g.out_shape, dtype=np.int64)
        P, hw, ohw = g.N * g.C, g.H * g.W, g.OH * g.OW
        idx = np.ascontiguousarray(idx).reshape(P, ohw)
        if t is not None:
            return _encode_lut(idx, g, t, cpu.kernels("maxpool")), np.asarray(g.out_shape, dtype=np.int64)
        # int32 arithmetic halves the work of every step below; int64 only for planes of >= 2**30 elements.
        it, ut = (np.int32, np.uint32) if hw + (g.OH * g.sh + g.OW * g.sw) < 1 << 30 else (np.int64, np.uint64)
        # Window origin of every output position, shape (OH*OW,).
        hs = np.repeat(np.arange(g.OH, dtype=it) * g.sh - g.pt, g.OW)
        ws = np.tile(np.arange(g.OW, dtype=it) * g.sw - g.pl, g.OH)
        span_h, span_w = (g.kh - 1) * g.dh + 1, (g.kw - 1) * g.dw + 1
        empty = empty_windows(g)
        any_empty = bool(empty.any())
        kdtype = np.uint8 if g.bits <= 8 else np.uint64
        k = np.empty((P, ohw), dtype=kdtype)
        rows = max(1, _CHUNK // max(ohw, 1))
        for p0 in range(0, P, rows):
            p1 = min(P, p0 + rows)
            rel64 = idx[p0:p1] - (np.arange(p0, p1, dtype=np.int64) * hw)[:, None]
            ok = rel64.view(np.uint64) < np.uint64(hw)  # 0 <= rel < H*W in one unsigned compare
            # Out-of-range values may wrap in the cast; they have already failed `ok`.
            rel = rel64.astype(it, copy=False)
            h = rel // it(g.W)
            w = h * it(g.W)
            np.subtract(rel, w, out=w)
            h -= hs
            w -= ws
            ok &= h.view(ut) < ut(span_h)
            ok &= w.view(ut) < ut(span_w)
            if g.dh > 1:
                ok &= h % g.dh == 0
                h //= g.dh
            if g.dw > 1:
                ok &= w % g.dw == 0
                w //= g.dw
            if any_empty:
                ok[:, empty] = rel64[:, empty] == -g.W - 1
                h[:, empty] = 0
                w[:, empty] = 0
            if not ok.all():
                bad = np.argwhere(~ok)[0]
                e = (p0 + int(bad[0])) * ohw + int(bad[1])
                raise ValueError(f"maxpool_index: index {int(idx.reshape(-1)[e])} at flat position {e} is not "
                                 f"inside its pooling window (wrong params or not MaxPool indices)")
            h *= g.kw
            h += w
            k[p0:p1] = h
        return pack_bits(k, g.bits), np.asarray(g.out_shape, dtype=np.int64)

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        g = cached_geometry(params)
        packed, shape_arr = payload
        shape = tuple(int(d) for d in np.asarray(shape_arr).reshape(-1))
        if shape != g.out_shape:
            raise ValueError(f"maxpool_index: payload shape {shape} != {g.out_shape} implied by params")
        P, ohw = g.N * g.C, g.OH * g.OW
        if (kern := cpu.kernels("bits")) is not None and g.kh * g.kw <= 1 << 20:
            packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
            if packed.size != (P * ohw * g.bits + 7) // 8:
                raise ValueError(f"maxpool_index: {packed.size} bytes cannot hold {P * ohw} offsets of {g.bits} bits")
            out, corrupt = kern.maxpool_decode(packed, g)
            if corrupt:
                raise ValueError("maxpool_index: corrupt payload (offset outside the window)")
            return out.reshape(shape)
        t = fast_tables(g)
        if t is not None and 8 % g.bits == 0:
            # The table path reads the packed bytes directly; the offsets are checked on the bytes too, so no
            # unpacked copy (two temporaries of one byte per offset) sits beside the int64 output.
            packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
            if packed.size != (P * ohw * g.bits + 7) // 8:
                raise ValueError(f"maxpool_index: {packed.size} bytes cannot hold {P * ohw} offsets of {g.bits} bits")
            if offsets_outside_window(packed, g.bits, P * ohw, g.kh * g.kw):
                raise ValueError("maxpool_index: corrupt payload (offset outside the window)")
            return _decode_lut(packed, g, t).reshape(shape)
        k = unpack_bits(packed, g.bits, P * ohw).reshape(P, ohw)
        if k.size and int(k.max()) >= g.kh * g.kw:
            raise ValueError("maxpool_index: corrupt payload (offset outside the window)")
        if t is not None:
            return _decode_lut(packed, g, t).reshape(shape)
        # idx = plane*H*W + origin + (k // kw)*dh*W + (k % kw)*dw
        #     = plane*H*W + origin + k*dw + (k // kw)*(dh*W - kw*dw): int32 arithmetic on in-cache blocks
        # (a gather through an offset table was 2x slower: np.take widens the uint8 indices first).
        origin = ((np.arange(g.OH, dtype=np.int64) * g.sh - g.pt)[:, None] * g.W
                  + (np.arange(g.OW, dtype=np.int64) * g.sw - g.pl)[None, :]).reshape(-1)
        hw = g.H * g.W
        it = np.int32 if g.kh * g.kw * (g.dh * g.W + g.dw) < 1 << 30 else np.int64
        row_step = it(g.dh * g.W - g.kw * g.dw)
        out = np.empty((P, ohw), dtype=np.int64)
        rows = max(1, _CHUNK // max(ohw, 1))
        for p0 in range(0, P, rows):
            p1 = min(P, p0 + rows)
            kk = k[p0:p1].astype(it)
            q = kk // it(g.kw)
            q *= row_step
            if g.dw != 1:
                kk *= it(g.dw)
            kk += q
            blk = out[p0:p1]
            np.add(kk, origin, out=blk)
            blk += (np.arange(p0, p1, dtype=np.int64) * hw)[:, None]
        empty = empty_windows(g)
        if empty.any():
            out[:, empty] = (np.arange(P, dtype=np.int64) * hw - g.W - 1)[:, None]
        return out.reshape(shape)

    # -- CuPy -------------------------------------------------------------------------------------------
    def _geom_args(self, g: PoolGeometry) -> tuple[np.int64, ...]:
        return tuple(gpu.i64(v) for v in (g.OH, g.OW, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.dh, g.dw))

    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        g = geometry(**params)
        if x.dtype != cp.int64:
            raise ValueError(f"maxpool_index: expected int64 indices, got {x.dtype}")
        if tuple(x.shape) != g.out_shape:
            raise ValueError(f"maxpool_index: index tensor shape {x.shape} != {g.out_shape} implied by params")
        idx = cp.ascontiguousarray(x)
        n = int(idx.size)
        nbytes = (n * g.bits + 7) // 8
        out = cp.empty(nbytes, dtype=cp.uint8)
        err = cp.zeros(1, dtype=cp.int32)
        gpu.launch(self.kernel_file, "maxpool_index_encode", nbytes,
                   (idx, out, gpu.i64(n), gpu.i64(nbytes), gpu.i64(g.bits), *self._geom_args(g), err))
        if int(err.get()[0]):
            raise ValueError("maxpool_index: an index is not inside its pooling window "
                             "(wrong params or not MaxPool indices)")
        return out, gpu.shape_array(g.out_shape)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        check = params.pop("check", True)  # False: skip the corrupt-offset sync (payloads made in-process)
        g = geometry(**params)
        packed, shape_arr = payload
        shape = gpu.host_shape(shape_arr)
        if shape != g.out_shape:
            raise ValueError(f"maxpool_index: payload shape {shape} != {g.out_shape} implied by params")
        n = int(np.prod(shape, dtype=np.int64))
        packed = cp.ascontiguousarray(packed, dtype=cp.uint8).reshape(-1)
        if packed.size != (n * g.bits + 7) // 8:
            raise ValueError(f"maxpool_index: {packed.size} bytes cannot hold {n} offsets of {g.bits} bits")
        out = cp.empty(n, dtype=cp.int64)
        err = cp.zeros(1, dtype=cp.int32)
        gpu.launch(self.kernel_file, "maxpool_index_decode", n,
                   (packed, out, gpu.i64(n), gpu.i64(g.bits), *self._geom_args(g), err))
        if check and int(err.get()[0]):
            raise ValueError("maxpool_index: corrupt payload (offset outside the window)")
        return out.reshape(shape)
