"""Op-layer framing of codec payloads: a header check always, a payload checksum on request.

The codecs' bitstreams are left exactly as they are (the NumPy, numba and CUDA backends must keep producing
the same bytes); the frame travels in the op's ``shape`` payload array, which every codec has: the encode
op appends int64 frame words after the dims, the decode op checks and strips them before the codec sees the
payload. Layout of the op's ``shape`` output (int64), for a codec with k payload arrays besides ``shape``:

    dims[ndim] | MAGIC | ndim + flags<<8 + k<<16 + codec_id<<32 | nbytes[0..k) | checksum | header_crc

* MAGIC: b"ONXCMP" + FRAME_VERSION + 0 (little-endian int64) -- the op-set version of the framing;
* codec_id: crc32 of the codec name (a payload fed to another codec's decoder is refused);
* nbytes: byte count of each payload array (truncation or extension is refused);
* checksum: xxh3-64 (top bit cleared) over every payload array's bytes when FLAG_CHECKSUM is set, else 0;
* header_crc: crc32 over all the words before it, dims included (a flipped dim or count is refused).

FLAG_FAILED marks the placeholder payload an encode op hands ORT after failing (its error is already
recorded); the decode op then emits zeros of ``dims`` without recording a second error.
FLAG_STORED marks a *token* frame: the payload itself is held by the process's payload store
(``runtime.payload_store``), the other payload arrays are empty and the checksum word holds the token.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

FRAME_VERSION = 1
MAGIC = int.from_bytes(b"ONXCMP" + bytes([FRAME_VERSION, 0]), "little")
FLAG_CHECKSUM = 1
FLAG_FAILED = 2
FLAG_STORED = 4
_KNOWN_FLAGS = FLAG_CHECKSUM | FLAG_FAILED | FLAG_STORED
_MAX_NDIM = 64


class PayloadError(ValueError):
    """A payload failed the op layer's header check or checksum (corrupt, truncated, or not ours)."""


def _codec_id(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _shape_index(codec: Any) -> int:
    return list(codec.payload_names).index("shape")


def frame_words(codec: Any) -> int:
    """int64 words the frame adds to the codec's ``shape`` array."""
    return 4 + len(codec.payload_names) - 1


def _checksum(arrays: list[np.ndarray]) -> int:
    import xxhash

    h = xxhash.xxh3_64()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data)
    return h.intdigest() & 0x7FFFFFFFFFFFFFFF


def _header_crc(words: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(words, dtype="<i8").tobytes())


def _build(codec: Any, dims: tuple[int, ...], others: list[np.ndarray], flags: int, checksum: int) -> np.ndarray:
    k = len(codec.payload_names) - 1
    words = np.empty(len(dims) + frame_words(codec), dtype=np.int64)
    words[:len(dims)] = dims
    head = [MAGIC, len(dims) | flags << 8 | k << 16 | _codec_id(codec.name) << 32, *(int(a.nbytes) for a in others),
            checksum]
    words[len(dims):-1] = head
    words[-1] = _header_crc(words[:-1])
    return words


def frame(codec: Any, arrays: tuple[np.ndarray, ...], *, checksum: bool = False) -> tuple[np.ndarray, ...]:
    """The codec's payload with its ``shape`` array framed (see the module doc)."""
    si = _shape_index(codec)
    dims = tuple(int(d) for d in np.asarray(arrays[si]).reshape(-1))
    others = [a for i, a in enumerate(arrays) if i != si]
    framed = _build(codec, dims, others, FLAG_CHECKSUM if checksum else 0, _checksum(others) if checksum else 0)
    return tuple(framed if i == si else a for i, a in enumerate(arrays))


def failed_payload(codec: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """What an encode op that failed hands ORT: empty arrays and a frame saying "failed, dims = shape"."""
    si = _shape_index(codec)
    others = [np.zeros(0, dtype=d) for i, d in enumerate(codec.payload_dtypes) if i != si]
    framed = _build(codec, tuple(int(d) for d in shape), others, FLAG_FAILED, 0)
    it = iter(others)
    return tuple(framed if i == si else next(it) for i in range(len(codec.payload_names)))


def stored_payload(codec: Any, shape: tuple[int, ...], token: int) -> tuple[np.ndarray, ...]:
    """What an encode op hands ORT when the payload store holds its payload: empty arrays and a frame saying
    "stored under ``token``, dims = shape" (a few dozen bytes cross the PyOp bridge instead of the payload)."""
    if not 0 < token < 1 << 63:
        raise ValueError(f"payload token {token} out of range")
    si = _shape_index(codec)
    others = [np.zeros(0, dtype=d) for i, d in enumerate(codec.payload_dtypes) if i != si]
    framed = _build(codec, tuple(int(d) for d in shape), others, FLAG_STORED, token)
    it = iter(others)
    return tuple(framed if i == si else next(it) for i in range(len(codec.payload_names)))


def stored_token(codec: Any, arrays: tuple[Any, ...]) -> tuple[int, tuple[int, ...]] | None:
    """(token, dims) when ``arrays`` (a decode op's payload inputs) are a payload-store token frame, else None
    (an ordinary payload: ``unframe`` it). Raises PayloadError for a frame that does not check out."""
    si = _shape_index(codec)
    if len(arrays) != len(codec.payload_names):
        raise PayloadError(f"{codec.name}: {len(arrays)} payload arrays, expected {len(codec.payload_names)}")
    dims, flags, head = _header(codec, arrays[si])
    if not flags & FLAG_STORED:
        return None
    return int(head[-2]), dims


def _header(codec: Any, shape_arr: Any) -> tuple[tuple[int, ...], int, np.ndarray]:
    """(dims, flags, frame words) of a framed ``shape`` array; PayloadError unless the header checks out."""
    words = np.asarray(shape_arr)
    if words.dtype != np.int64:
        raise PayloadError(f"{codec.name}: framed shape array must be int64, got {words.dtype}")
    words = words.reshape(-1)
    f = frame_words(codec)
    if words.size < f:
        raise PayloadError(f"{codec.name}: payload has no onnxcomp frame ({words.size} shape words, need >= {f})")
    if int(words[-1]) != _header_crc(words[:-1]):
        raise PayloadError(f"{codec.name}: payload header checksum mismatch (corrupt shape or frame)")
    head = words[-f:]
    if int(head[0]) != MAGIC:
        raise PayloadError(f"{codec.name}: payload frame has a bad magic/version "
                           f"(this build reads frame version {FRAME_VERSION})")
    info = int(head[1])
    ndim, flags, k, cid = info & 0xFF, (info >> 8) & 0xFF, (info >> 16) & 0xFFFF, info >> 32
    if cid != _codec_id(codec.name):
        raise PayloadError(f"{codec.name}: payload was framed by another codec")
    if k != len(codec.payload_names) - 1 or flags & ~_KNOWN_FLAGS or ndim != words.size - f:
        raise PayloadError(f"{codec.name}: payload frame does not match this codec's layout")
    dims = tuple(int(d) for d in words[:ndim])
    if any(d < 0 for d in dims) or ndim > _MAX_NDIM:
        raise PayloadError(f"{codec.name}: payload frame holds an invalid shape {dims}")
    return dims, flags, head


def framed_dims(codec: Any, shape_arr: Any) -> tuple[int, ...] | None:
    """The dims a framed ``shape`` array records, or None if its header does not check out."""
    try:
        return _header(codec, shape_arr)[0]
    except PayloadError:
        return None


def unframe(codec: Any, arrays: tuple[np.ndarray, ...], *, verify: bool = True
            ) -> tuple[tuple[np.ndarray, ...] | None, tuple[int, ...]]:
    """(payload as the codec made it, dims) after the header check (and the checksum, when the encoder wrote
    one and ``verify``). The payload is None for an encode op's failure placeholder. Raises PayloadError."""
    si = _shape_index(codec)
    if len(arrays) != len(codec.payload_names):
        raise PayloadError(f"{codec.name}: {len(arrays)} payload arrays, expected {len(codec.payload_names)}")
    dims, flags, head = _header(codec, arrays[si])
    if flags & FLAG_FAILED:
        return None, dims
    if flags & FLAG_STORED:
        raise PayloadError(f"{codec.name}: payload is a payload-store token, not the payload (stored_token reads it)")
    others = [np.asarray(a) for i, a in enumerate(arrays) if i != si]
    for name, a, n in zip((p for i, p in enumerate(codec.payload_names) if i != si), others, head[2:-2]):
        if int(a.nbytes) != int(n):
            raise PayloadError(f"{codec.name}: payload array {name!r} has {a.nbytes} bytes, the frame says {int(n)} "
                               "(truncated or extended)")
    if verify and flags & FLAG_CHECKSUM and _checksum(others) != int(head[-2]):
        raise PayloadError(f"{codec.name}: payload checksum mismatch (corrupt payload bytes)")
    plain = np.asarray(dims, dtype=np.int64).reshape(len(dims))
    return tuple(plain if i == si else a for i, a in enumerate(arrays)), dims
