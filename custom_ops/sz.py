"""``sz``: error-bounded lossy codec for float32 activations (SZ-style dual quantization + cuSZp-style packing).

Encoding, for an absolute error bound ``eb`` (COMET §3, cuSZ dual quantization; cuSZp fixed-length blocks):

1. Pre-quantize in float64: ``q = rint(x · (1 / (2·eb)))``; the reconstruction is ``x̂ = float32(2·eb·q)``.
   Real arithmetic gives ``|x − x̂| ≤ eb``; float32 rounding of ``2·eb·q`` can break that near the bound, so
   every element is *checked* (``|x − x̂| ≤ eb`` in float64) and those that fail are stored as outliers
   (flat index + raw float32 bits), as are NaN/±Inf and ``|q| > QMAX`` (the code-width limit; their q is 0).
   Exact zeros give q = 0 and decode to exactly 0 (COMET's zero filter holds by construction); −0.0 decodes
   to +0.0 (equal value, error 0).
2. 1-D Lorenzo on the integers, reset at each block of ``BLOCK`` = 32 elements (flattened C order):
   ``d[i] = q[i] − q[i−1]``, ``d[i] = q[i]`` at a block start; the padding past n has d = 0.
3. Per block, fixed-length packing: bit width ``r`` = bit length of ``max |d|`` (0..31) in ``rates``; a block
   with r > 0 stores r + 1 little-endian 32-bit words in ``data``: the sign plane (bit k = ``d[k] < 0``),
   then magnitude planes j = 0..r−1 (bit k = bit j of ``|d[k]|``). All-zero blocks cost only their rate
   byte. Block offsets are the exclusive prefix sum of ``4·(r+1)`` (so every block is word aligned): both the
   CuPy backend (one warp per block, ballots) and the NumPy backend (vectorised 32x32 bit-matrix transposes
   over chunks of blocks) build the same bytes.

Optional CPU-only ``zstd_level``: ``rates`` and ``data`` are each replaced by a zstd frame (flag in the
header). Decode needs no params: the eb used and the flags are in ``header``.

Payload (``payload_names``):
  header       uint8[16]: b"SZ", version 1, flags (bit 0: zstd), uint32 block size (32), float64 eb (LE)
  rates        uint8[ceil(n/32)]  (or its zstd frame)
  data         uint8[4·Σ(r+1) over r>0]  (or its zstd frame)
  outlier_idx  int64[m]  ascending flat indices
  outlier_bits uint32[m] raw float32 bits of those elements (NaN payloads kept)
  shape        int64[ndim]
"""
from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from . import cpu, gpu
from .base import Codec, Payload, register

BLOCK = 32                 # deltas per block = one CUDA warp
QMAX = (1 << 30) - 1       # |q| <= QMAX keeps |d| < 2^31: magnitude fits 31 bits, rate fits 5 bits
MAX_RATE = 31
VERSION = 1
HEADER_BYTES = 16
FLAG_ZSTD = 1
_MAGIC = b"SZ"
_ENCODE_PARAMS = frozenset({"eb", "zstd_level"})
_SZ_K = 4                  # blocks per warp step in kernels/sz.cu (SZ_K)

if sys.byteorder != "little":  # the word/byte views below assume the payload's little-endian layout
    raise ImportError("the sz codec's NumPy backend needs a little-endian machine")


# -- params and header --------------------------------------------------------------------------------------
def _check_eb(eb: Any) -> float:
    try:
        ebf = float(eb)
    except (TypeError, ValueError):
        raise ValueError(f"sz: eb must be a number, got {eb!r}") from None
    if not (math.isfinite(ebf) and ebf > 0.0 and math.isfinite(2.0 * ebf)):
        raise ValueError(f"sz: eb must be a finite float > 0 (and 2·eb finite), got {eb!r}")
    return ebf


def _encode_params(params: dict[str, Any]) -> tuple[float, int | None]:
    unknown = set(params) - _ENCODE_PARAMS
    if unknown:
        raise ValueError(f"sz: unknown params {sorted(unknown)}; known: {sorted(_ENCODE_PARAMS)}")
    if "eb" not in params:
        raise ValueError("sz: encode needs eb= (absolute error bound, float > 0)")
    eb = _check_eb(params["eb"])
    level = params.get("zstd_level")
    if level is None:
        return eb, None
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not -7 <= int(level) <= 22 \
            or int(level) == 0:
        raise ValueError(f"sz: zstd_level must be an int in [-7, 22] other than 0 (or None), got {level!r}")
    return eb, int(level)


def make_header(eb: float, flags: int = 0) -> np.ndarray:
    """The 16-byte header: magic, version, flags, block size, eb (float64), all little-endian."""
    head = bytearray(_MAGIC) + bytes([VERSION, flags]) + BLOCK.to_bytes(4, "little")
    head += np.float64(eb).astype("<f8").tobytes()
    return np.frombuffer(bytes(head), dtype=np.uint8).copy()


def parse_header(header: Any) -> tuple[float, int]:
    """(eb, flags) from a header array; ValueError if it is not an sz v1 header."""
    h = np.asarray(header, dtype=np.uint8).reshape(-1)
    if h.size != HEADER_BYTES or bytes(h[:2]) != _MAGIC:
        raise ValueError("sz: payload header is not an sz header")
    if int(h[2]) != VERSION:
        raise ValueError(f"sz: unsupported payload version {int(h[2])}")
    block = int.from_bytes(bytes(h[4:8]), "little")
    if block != BLOCK:
        raise ValueError(f"sz: payload block size {block}, this build decodes {BLOCK}")
    flags = int(h[3])
    if flags & ~FLAG_ZSTD:
        raise ValueError(f"sz: unknown header flags {flags:#x}")
    return _check_eb(np.frombuffer(bytes(h[8:16]), dtype="<f8")[0]), flags


def _numel(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _nblocks(n: int) -> int:
    return -(-n // BLOCK)


def _block_words(rates: np.ndarray) -> np.ndarray:
    """32-bit words each block occupies in ``data``: 0 for r = 0, else sign plane + r magnitude planes."""
    r = rates.astype(np.int64)
    return np.where(r > 0, r + 1, 0)


# -- sizes ----------------------------------------------------------------------------------------------------
def sz_stats(x: np.ndarray, eb: float) -> dict[str, float]:
    """The stats ``predicted_nbytes`` takes, measured on ``x`` (exact: prediction == payload size).

    ``mean_rate``: mean bit width r over blocks with r > 0; ``nonzero_block_fraction``: fraction of blocks
    with r > 0; ``outlier_fraction``: outliers / n.
    """
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    eb = _check_eb(eb)
    rates, _, idx = _encode_blocks_cpu(x, eb)
    nz = rates > 0
    nb = max(rates.size, 1)
    return {
        "mean_rate": float(rates[nz].mean()) if nz.any() else 0.0,
        "nonzero_block_fraction": float(nz.sum() / nb),
        "outlier_fraction": float(idx.size / max(x.size, 1)),
    }


# -- NumPy stages ---------------------------------------------------------------------------------------------
# The NumPy backend works "lane-major": arrays of shape [32, nblocks] whose row k holds element k of every
# block, so each step is a long contiguous vector op; a 32x32 bit-matrix transpose per block turns the 32
# magnitudes of a block into its 32 bit planes (the warp ballots of the CUDA kernel do the same).
def _quantize_cpu(x: np.ndarray, eb: float) -> tuple[np.ndarray, np.ndarray]:
    """(q int32[n], outlier bool[n]) for flat float32 x. The float64 ops mirror sz_quant in kernels/sz.cu."""
    twoeb = 2.0 * eb
    recip = 1.0 / twoeb
    with np.errstate(all="ignore"):                # NaN/Inf inputs and overflowing x / 2eb are expected
        x64 = x.astype(np.float64)
        qf = np.multiply(x64, recip)
        np.rint(qf, out=qf)
        ok = np.abs(qf) <= QMAX                    # NaN/±Inf and too-large |q| -> False
        qf[~ok] = 0.0
        xh = np.multiply(qf, twoeb).astype(np.float32)  # the value decode will produce
        x64 -= xh                                  # x64 is now the error x - x̂, in float64
        np.abs(x64, out=x64)
        outlier = ~(x64 <= eb)                     # NaN error (x NaN/Inf) is an outlier too
    return qf.astype(np.int32), outlier


def _transpose32(a: np.ndarray) -> np.ndarray:
    """In place on a [32, nb] uint32 array: per column, bit j of a[k] <-> bit k of a[j] (recursive block swap)."""
    nb = a.shape[1]
    t = np.empty(16 * nb, dtype=np.uint32)
    j, m = 16, 0x0000FFFF
    while j:
        a4 = a.reshape(BLOCK // (2 * j), 2, j, nb)
        lo, hi = a4[:, 0], a4[:, 1]
        tt = t.reshape(BLOCK // (2 * j), j, nb)
        np.right_shift(lo, np.uint32(j), out=tt)
        tt ^= hi
        tt &= np.uint32(m)
        hi ^= tt
        tt <<= np.uint32(j)
        lo ^= tt
        j //= 2
        m ^= (m << j) & 0xFFFFFFFF
    return a


def _deltas_cpu(q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Block-reset Lorenzo deltas of flat q[n], lane-major: (|d| uint32[32, nb], d < 0 bool[32, nb]).

    Padding past n has d = 0."""
    nb = _nblocks(n)
    padded = np.zeros(nb * BLOCK, dtype=np.int32)
    padded[:n] = q
    qb = np.ascontiguousarray(padded.reshape(nb, BLOCK).T)
    d = np.empty_like(qb)
    d[0] = qb[0]
    np.subtract(qb[1:], qb[:-1], out=d[1:])
    if n % BLOCK:  # padding lanes of the last block
        d[n % BLOCK:, -1] = 0
    neg = d < 0
    return np.abs(d).view(np.uint32), neg  # |d| < 2^31, never INT32_MIN


def _rates_cpu(mag: np.ndarray) -> np.ndarray:
    """Bit length of each block's largest magnitude (frexp's exponent is exact below 2^53)."""
    return np.frexp(mag.max(axis=0, initial=0).astype(np.float64))[1].astype(np.uint8)


def _word_mask(rates: np.ndarray) -> np.ndarray:
    """[nb, 32] bool: which of a block's candidate words (sign, then planes 0..30) are stored, in stream
    order. |d| < 2^31, so a block's rate is at most 31 and its words at most 32."""
    r = rates[:, None]
    return (np.arange(BLOCK, dtype=np.uint8)[None, :] <= r) & (r > 0)


def _pack_cpu(mag: np.ndarray, neg: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """The packed words (uint32) of lane-major blocks, in block order.

    Bit 31 of a magnitude is always 0, so it carries the lane's sign into the one 32x32 transpose: plane 31
    comes out as the sign word (bit k: lane k < 0)."""
    nb = rates.size
    planes = np.left_shift(neg.view(np.uint8).astype(np.uint32), np.uint32(31))
    planes |= mag
    _transpose32(planes)
    words = np.empty((BLOCK, nb), dtype=np.uint32)      # stream order: sign word, then planes 0..30
    words[0] = planes[BLOCK - 1]
    words[1:] = planes[:BLOCK - 1]
    return words.T[_word_mask(rates)]


def _unpack_cpu(data32: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Deltas int32[32, nb] (lane-major) from the packed words of these blocks (the inverse of _pack_cpu)."""
    nb = rates.size
    words = np.zeros((BLOCK, nb), dtype=np.uint32)
    words.T[_word_mask(rates)] = data32
    planes = np.empty((BLOCK, nb), dtype=np.uint32)
    planes[BLOCK - 1] = words[0]
    planes[:BLOCK - 1] = words[1:]
    _transpose32(planes)                                     # per lane: bit 31 sign, bits 0-30 |d|
    s = (planes >> np.uint32(31)).view(np.int32)
    np.negative(s, out=s)                                    # 0 or -1 (all ones)
    d = planes.view(np.int32)
    d &= np.int32(0x7FFFFFFF)
    d ^= s
    d -= s                                                   # conditional two's-complement negation
    return d


# Chunks of blocks keep the NumPy temporaries cache-sized (about 3x faster than whole-tensor passes).
_CHUNK_BLOCKS = 4096


def _encode_blocks_cpu(flat: np.ndarray, eb: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rates uint8[nb], data uint8[...], outlier_idx int64[m]) for flat float32 x."""
    n = flat.size
    step = _CHUNK_BLOCKS * BLOCK
    rates, data, idx = [], [], []
    for start in range(0, n, step):
        chunk = flat[start:start + step]
        q, outlier = _quantize_cpu(chunk, eb)
        mag, neg = _deltas_cpu(q, chunk.size)
        r = _rates_cpu(mag)
        rates.append(r)
        data.append(_pack_cpu(mag, neg, r))
        idx.append(np.flatnonzero(outlier) + start)
    if not rates:
        return np.zeros(0, np.uint8), np.zeros(0, np.uint8), np.zeros(0, np.int64)
    return (np.concatenate(rates), np.concatenate(data).view(np.uint8),
            np.concatenate(idx).astype(np.int64, copy=False))


def _decode_blocks_cpu(rates: np.ndarray, data: np.ndarray, n: int, eb: float) -> np.ndarray:
    """Flat float32[n] reconstruction (outliers not yet patched)."""
    nb = rates.size
    twoeb = 2.0 * eb
    words = _block_words(rates)
    ends = np.cumsum(words)
    data32 = np.ascontiguousarray(data).view(np.uint32)
    y = np.empty(nb * BLOCK, dtype=np.float32)
    for b0 in range(0, nb, _CHUNK_BLOCKS):
        b1 = min(b0 + _CHUNK_BLOCKS, nb)
        w0 = int(ends[b0 - 1]) if b0 else 0
        d = _unpack_cpu(data32[w0:int(ends[b1 - 1])], rates[b0:b1])
        for k in range(1, BLOCK):                              # undo Lorenzo within each block
            d[k] += d[k - 1]                                   # (row adds: numpy's axis-0 cumsum is slow)
        with np.errstate(over="ignore"):  # x̂ beyond float32 range -> Inf; those elements are outliers
            y[b0 * BLOCK:b1 * BLOCK].reshape(b1 - b0, BLOCK)[:] = np.multiply(d, twoeb, dtype=np.float64).T
    return y[:n]


def _zstd_compress(a: np.ndarray, level: int) -> np.ndarray:
    import zstandard

    return np.frombuffer(zstandard.ZstdCompressor(level=level).compress(a.tobytes()), dtype=np.uint8).copy()


def _zstd_decompress(a: np.ndarray, nbytes: int) -> np.ndarray:
    import zstandard

    try:
        raw = zstandard.ZstdDecompressor().decompress(np.ascontiguousarray(a).tobytes(), max_output_size=nbytes)
    except zstandard.ZstdError as exc:
        raise ValueError(f"sz: corrupt zstd frame: {exc}") from None
    if len(raw) != nbytes:
        raise ValueError(f"sz: zstd frame holds {len(raw)} bytes, expected {nbytes}")
    return np.frombuffer(raw, dtype=np.uint8)


def _check_payload(rates: np.ndarray, data_nbytes: int, idx: Any, bits: Any, n: int) -> None:
    if rates.size != _nblocks(n):
        raise ValueError(f"sz: {rates.size} block rates for {n} elements (need {_nblocks(n)})")
    if rates.size and int(rates.max()) > MAX_RATE:
        raise ValueError(f"sz: block bit width {int(rates.max())} > {MAX_RATE}")
    need = 4 * int(_block_words(rates).sum()) if rates.size else 0
    if data_nbytes != need:
        raise ValueError(f"sz: data has {data_nbytes} bytes, the block rates need {need}")
    if idx.size != bits.size:
        raise ValueError(f"sz: {idx.size} outlier indices but {bits.size} outlier values")


def _split_payload(payload: Payload) -> tuple[Any, ...]:
    if len(payload) != 6:
        raise ValueError(f"sz: payload has {len(payload)} arrays, expected 6 ({', '.join(SZ.payload_names)})")
    return tuple(payload)


@register
class SZ(Codec):
    name = "sz"
    lossless = False
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("header", "rates", "data", "outlier_idx", "outlier_bits", "shape")
    payload_dtypes = ("uint8", "uint8", "uint8", "int64", "uint32", "int64")
    kernel_file = "sz.cu"

    def validate_params(self, **params: Any) -> None:
        _encode_params(params)  # the same check encode_cpu/encode_gpu run first

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        """Payload bytes (without zstd) from ``mean_rate`` (mean bit width of blocks with r > 0, 0..31),
        ``nonzero_block_fraction`` (default 1), or instead ``density`` (fraction of nonzero elements; blocks
        are then assumed all-zero with probability (1 − density)^32, i.e. independent zeros, which
        overestimates the size of clustered ReLU zeros), and ``outlier_fraction`` (default 0).
        ``sz_stats(x, eb)`` measures all three on a tensor."""
        n = _numel(shape)
        nb = _nblocks(n)
        if "mean_rate" not in stats:
            raise TypeError("sz.predicted_nbytes needs mean_rate= (see sz_stats)")
        rate = float(stats["mean_rate"])
        if "nonzero_block_fraction" in stats:
            frac = float(stats["nonzero_block_fraction"])
        elif "density" in stats:
            frac = 1.0 - (1.0 - float(stats["density"])) ** BLOCK
        else:
            frac = 1.0
        out_frac = float(stats.get("outlier_fraction", 0.0))
        if not (0.0 <= rate <= MAX_RATE and 0.0 <= frac <= 1.0 and 0.0 <= out_frac <= 1.0):
            raise ValueError(f"sz.predicted_nbytes: stats out of range: {stats}")
        data = 4.0 * (rate + 1.0) * round(frac * nb) if rate > 0 else 0.0
        outliers = 12 * round(out_frac * n)
        return int(HEADER_BYTES + nb + round(data) + outliers + 8 * len(shape))

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """(tensor, params) cases for the generic codec tests: ReLU-like, odd sizes, specials, empty, scalar."""
        relu = lambda s: (np.maximum(rng.standard_normal(s), 0)).astype(np.float32)  # noqa: E731
        cases = [(relu((2, 3, 5, 7)), {"eb": 1e-2}), (relu((7,)), {"eb": 1e-3}),
                 (rng.standard_normal((3, 33)).astype(np.float32) * 100, {"eb": 0.5}),
                 (relu((2, 3, 17, 9)), {"eb": 1e-6})]
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.0, 3e38, -3e38],
                           dtype=np.float32)
        cases += [(special, {"eb": 1e-3}), (np.zeros((4, 9), np.float32), {"eb": 1e-3}),
                  (np.zeros((0, 4), np.float32), {"eb": 1e-3}), (np.float32(2.5).reshape(()), {"eb": 0.1}),
                  (np.full((65,), 1e30, np.float32), {"eb": 1e-9})]
        return cases

    # -- NumPy ------------------------------------------------------------------------------------------
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        eb, level = _encode_params(params)
        x = np.asarray(x)
        if x.dtype != np.float32:
            raise ValueError(f"sz encodes float32 tensors, got {x.dtype}")
        shape = np.asarray(x.shape, dtype=np.int64).reshape(x.ndim)
        flat = np.ascontiguousarray(x).reshape(-1)
        k = cpu.kernels("sz")
        rates, data, idx = (k.encode_blocks if k is not None else _encode_blocks_cpu)(flat, eb)
        obits = flat.view(np.uint32)[idx]
        flags = 0
        if level is not None:
            rates, data, flags = _zstd_compress(rates, level), _zstd_compress(data, level), FLAG_ZSTD
        return make_header(eb, flags), rates, data, idx, obits, shape

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        # params are ignored on purpose: everything decode needs (eb, flags) is in the header.
        header, rates, data, idx, obits, shape_arr = _split_payload(payload)
        eb, flags = parse_header(header)
        shape = tuple(int(s) for s in np.asarray(shape_arr).reshape(-1))
        n = _numel(shape)
        rates = np.asarray(rates, dtype=np.uint8).reshape(-1)
        data = np.asarray(data, dtype=np.uint8).reshape(-1)
        if flags & FLAG_ZSTD:
            rates = _zstd_decompress(rates, _nblocks(n))
            if rates.size and int(rates.max()) > MAX_RATE:
                raise ValueError(f"sz: block bit width {int(rates.max())} > {MAX_RATE}")
            data = _zstd_decompress(data, 4 * int(_block_words(rates).sum()))
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        obits = np.asarray(obits, dtype=np.uint32).reshape(-1)
        _check_payload(rates, data.size, idx, obits, n)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ValueError(f"sz: outlier index outside [0, {n})")
        k = cpu.kernels("sz")
        y = (k.decode_blocks if k is not None else _decode_blocks_cpu)(rates, data, n, eb)
        y.view(np.uint32)[idx] = obits
        return y.reshape(shape)

    # -- CuPy -------------------------------------------------------------------------------------------
    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        eb, level = _encode_params(params)
        if level is not None:
            raise ValueError("sz: the zstd pass is CPU-only; encode on the CPU or drop zstd_level")
        if x.dtype != cp.float32:
            raise ValueError(f"sz encodes float32 tensors, got {x.dtype}")
        shape = tuple(int(s) for s in x.shape)
        flat = cp.ascontiguousarray(x).reshape(-1)
        n = int(flat.size)
        nb = _nblocks(n)
        twoeb = np.float64(2.0 * eb)
        recip = np.float64(1.0 / (2.0 * eb))  # same double as _quantize_cpu's
        rates = cp.empty(nb, dtype=cp.uint8)
        ocount = cp.empty(nb, dtype=cp.uint8)
        warps = -(-nb // _SZ_K)  # kernels/sz.cu: a warp per SZ_K blocks
        gpu.launch(self.kernel_file, "sz_encode_rates", warps * BLOCK,
                   (flat, gpu.i64(n), gpu.i64(nb), recip, twoeb, np.float64(eb), rates, ocount))
        words = cp.where(rates > 0, rates.astype(cp.int64) + 1, 0)
        incl = cp.cumsum(words)
        oincl = cp.cumsum(ocount, dtype=cp.int64)
        total, m = (int(v) for v in cp.stack([incl[-1], oincl[-1]]).get()) if nb else (0, 0)  # one sync
        data = cp.empty(total, dtype=cp.uint32)
        idx = cp.empty(m, dtype=cp.int64)
        obits = cp.empty(m, dtype=cp.uint32)
        if total or m:
            gpu.launch(self.kernel_file, "sz_encode_pack", warps * BLOCK,
                       (flat, gpu.i64(n), gpu.i64(nb), recip, twoeb, rates, ocount, incl - words, oincl - ocount,
                        data, idx, obits))
        return (cp.asarray(make_header(eb)), rates, data.view(cp.uint8), idx, obits, gpu.shape_array(shape))

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        header, rates, data, idx, obits, shape_arr = _split_payload(payload)
        eb, flags = parse_header(cp.asnumpy(header))
        if flags & FLAG_ZSTD:  # zstd is CPU-only: inflate on the host, decode on the device
            host = self.decode_cpu(tuple(cp.asnumpy(p) for p in payload))
            return cp.asarray(host)
        shape = gpu.host_shape(shape_arr)
        n = _numel(shape)
        nb = _nblocks(n)
        rates = cp.ascontiguousarray(rates, dtype=cp.uint8).reshape(-1)
        data = cp.ascontiguousarray(data, dtype=cp.uint8).reshape(-1)
        if data.data.ptr % 4:  # the kernel reads 32-bit words
            data = data.copy()
        idx = cp.ascontiguousarray(idx, dtype=cp.int64).reshape(-1)
        obits = cp.ascontiguousarray(obits, dtype=cp.uint32).reshape(-1)
        if rates.size != nb:
            raise ValueError(f"sz: {rates.size} block rates for {n} elements (need {nb})")
        if idx.size != obits.size:
            raise ValueError(f"sz: {idx.size} outlier indices but {obits.size} outlier values")
        words = cp.where(rates > 0, rates.astype(cp.int64) + 1, 0)
        incl = cp.cumsum(words)
        # The checks below cost device->host syncs; check=False skips them for payloads this process just made
        # (onnxcomp.torch's saved-tensor hooks). Every other caller gets them.
        if params.get("check", True):
            if nb and int(rates.max()) > MAX_RATE:
                raise ValueError(f"sz: block bit width {int(rates.max())} > {MAX_RATE}")
            total = int(incl[-1]) if nb else 0
            if data.size != 4 * total:
                raise ValueError(f"sz: data has {data.size} bytes, the block rates need {4 * total}")
            if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
                raise ValueError(f"sz: outlier index outside [0, {n})")
        y = cp.empty(n, dtype=cp.float32)
        data32 = data.view(cp.uint32) if data.size else cp.zeros(1, dtype=cp.uint32)
        gpu.launch(self.kernel_file, "sz_decode", -(-nb // _SZ_K) * BLOCK,
                   (rates, incl - words, data32, gpu.i64(n), gpu.i64(nb), np.float64(2.0 * eb), y))
        if idx.size:
            y.view(cp.uint32)[idx] = obits
        return y.reshape(shape)
