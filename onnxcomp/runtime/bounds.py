"""Run-time error bounds for the error-bounded codec, and the statistics COMET's controller reads.

ORT fixes node attributes when a session is built, so a bound that changes during training cannot live in
an attribute. The encode op of a codec with a run-time bound looks up ``bound(key)`` on every call (the
attribute's ``eb`` is only the starting value); the controller writes new bounds between steps with
``set_bound``. When ``collecting`` is on, the ops also record per-layer statistics:
- the encoder: the tensor's nonzero ratio R and element count;
- the decoder: rms of its consumer's incoming gradient dY (the graph feeds it ReduceL2(dY) as its
  trigger, a single float, so no activation-sized input crosses the PyOp bridge).
Everything here is process-global and cheap; PyOps run in the process that owns the session.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OnnxcompError

_lock = threading.Lock()
_bounds: dict[str, float] = {}
_stats: dict[str, "LayerStats"] = {}
_payload: dict[str, list[int]] = {}   # key -> [encodes, payload bytes, raw bytes], every step
_capped: dict[str, list[float]] = {}  # key -> [encodes over their byte cap, largest eb the cap forced]
_collecting = False


@dataclass
class LayerStats:
    """What the ops saw of one encoded tensor during the last collecting step."""

    nonzero_ratio: float | None = None
    numel: int | None = None
    dy_rms: float | None = None
    dy_numel: int | None = None
    eb_used: list[float] = field(default_factory=list)


def bound(key: str, default: float) -> float:
    """The bound an encoder uses now: the controller's, else the graph attribute's ``default``."""
    return _bounds.get(key, default)


def set_bound(key: str, eb: float) -> None:
    from onnxcomp.custom_ops import get_codec

    try:
        get_codec("sz").validate_params(eb=eb)  # what the encoder would refuse mid-step
    except ValueError as exc:
        raise ValueError(f"error bound for {key!r}: {exc}") from None
    with _lock:
        _bounds[key] = float(eb)


def bounds() -> dict[str, float]:
    with _lock:
        return dict(_bounds)


def reset() -> None:
    """Forget every bound and statistic (a new training run)."""
    global _collecting
    with _lock:
        _bounds.clear()
        _stats.clear()
        _payload.clear()
        _capped.clear()
        _last_forced.clear()
        _collecting = False


def set_collecting(on: bool) -> None:
    global _collecting
    _collecting = bool(on)


def collecting() -> bool:
    return _collecting


def _entry(key: str) -> LayerStats:
    s = _stats.get(key)
    if s is None:
        with _lock:
            s = _stats.setdefault(key, LayerStats())
    return s


def record_activation(key: str, nonzero: int, numel: int, eb: float) -> None:
    s = _entry(key)
    s.nonzero_ratio = nonzero / numel if numel else 0.0
    s.numel = numel
    s.eb_used.append(eb)


def record_gradient(key: str, dy_l2: float, dy_numel: int) -> None:
    s = _entry(key)
    s.dy_rms = dy_l2 / dy_numel ** 0.5 if dy_numel else 0.0
    s.dy_numel = dy_numel


def record_payload(key: str, payload_bytes: int, raw_bytes: int) -> None:
    with _lock:
        e = _payload.setdefault(key, [0, 0, 0])
        e[0] += 1
        e[1] += payload_bytes
        e[2] += raw_bytes


def payload_summary() -> dict[str, float]:
    """What the error-bounded encoders held, per step on average: encoded bytes, raw bytes, their ratio (the
    compression an ablation at other bounds has to be compared at); and how many encodes their byte cap
    forced to a looser bound than the controller's (``encode_capped``)."""
    with _lock:
        held = sum(b / n for n, b, _ in _payload.values() if n)
        raw = sum(r / n for n, _, r in _payload.values() if n)
        capped = int(sum(c for c, _ in _capped.values()))
        encodes = int(sum(n for n, _, _ in _payload.values()))
    return {"encoded_bytes": held, "raw_bytes": raw, "ratio": raw / held if held else 0.0,
            "capped_encodes": capped, "encodes": encodes}


def capped() -> dict[str, tuple[int, float]]:
    """Per key: encodes the byte cap loosened, and the largest bound it forced."""
    with _lock:
        return {k: (int(c), float(eb)) for k, (c, eb) in _capped.items()}


# The loosest bound the cap search tries: far above any activation's magnitude (every value quantises to 0).
_MAX_CAP_EB = 1e30
_last_forced: dict[str, float] = {}


def encode_capped(codec: Any, x: Any, params: dict[str, Any], max_bytes: int, key: str) -> tuple[Any, ...]:
    """``codec.encode_cpu(x, **params)`` with a payload of at most ``max_bytes``: where the bound in ``params``
    gives more, the bound is doubled until the payload fits (the planner sized this stash's payload to the
    cap, so the step's peak stays within the budget whatever the controller's bound or the data do).

    A looser bound changes only how far the weight gradient may drift (COMET's σ), never memory; each such
    encode is counted (``capped``, ``payload_summary``). Non-finite values are outliers at any bound: a
    tensor with more of them than the cap holds stays over it (the largest bound's payload is returned)."""
    eb_name = "eb"
    eb = float(params[eb_name])
    payload = codec.encode_cpu(x, **params)
    if _nbytes(payload) <= max_bytes:
        return payload
    # Start the doubling at half the bound the cap last forced on this key (training data drift slowly): two
    # or three encodes per step instead of one per doubling from the controller's bound.
    last = _last_forced.get(key, 0.0)
    eb = max(eb, last / 2.0)
    while _nbytes(payload) > max_bytes and eb < _MAX_CAP_EB:
        eb = min(eb * 2.0, _MAX_CAP_EB)
        payload = codec.encode_cpu(x, **{**params, eb_name: eb})
    with _lock:
        _last_forced[key] = eb
        e = _capped.setdefault(key, [0, 0.0])
        e[0] += 1
        e[1] = max(e[1], eb)
    return payload


def _nbytes(payload: Any) -> int:
    import numpy as np

    return int(sum(np.asarray(p).nbytes for p in payload))


def stats() -> dict[str, LayerStats]:
    with _lock:
        return {k: LayerStats(v.nonzero_ratio, v.numel, v.dy_rms, v.dy_numel, list(v.eb_used)) for k, v in _stats.items()}


def clear_stats() -> None:
    with _lock:
        _stats.clear()


def load_bounds_file(path: str | Path) -> dict[str, float]:
    """Encoder key → error bound from a JSON file: `onnxcomp train --json` output (its "bounds" record)
    or a plain {key: eb} object."""
    try:
        loaded = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise OnnxcompError(f"{path}: cannot read error bounds ({exc})") from None
    if isinstance(loaded, dict) and isinstance(loaded.get("bounds"), dict):
        loaded = loaded["bounds"].get("bounds", loaded["bounds"])
    if not isinstance(loaded, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in loaded.values()):
        raise OnnxcompError(f"{path}: expected a JSON object of encoder key → error bound")
    out = {str(k): float(v) for k, v in loaded.items()}
    from onnxcomp.custom_ops import get_codec

    for key, eb in out.items():
        try:
            get_codec("sz").validate_params(eb=eb)
        except ValueError as exc:
            raise OnnxcompError(f"{path}: bound for {key!r}: {exc}") from None
    return out
