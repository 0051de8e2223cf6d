"""What an encoding option costs while its codec ops run, for the budget planner's virtual live curve.

An ``OnnxcompEncode_/Decode_<codec>`` PyOp holds more than its graph inputs and outputs while it runs (the
bridge's copy of its inputs, the codec's NumPy temporaries): planner/predict.py measures that on the
rewritten graph. The search (planner/auto.py) needs it earlier, per option, for every stash: measuring each
stash's codec on its own shape would take minutes on MobileNetV2, so each (codec, direction, params) is
measured once on one canonical tensor and scaled by the stash's bytes. On MobileNetV2 the lossy plan's peak
sat at a q8 encoder of a 12 MiB tensor (the encoder held ~4× its input) that the virtual curve did not show.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

# A 4 MiB NCHW float32 tensor: large enough that per-call constants vanish, small enough to encode fast.
_CANONICAL = (16, 16, 64, 64)


def workspace_bytes(codec: str, params: dict[str, Any], nbytes: int, native: str | None = None) -> tuple[int, int]:
    """(encode, decode) bytes an option's codec ops hold beyond their graph inputs and outputs, for a stash
    of ``nbytes`` float32 bytes. Native fp16 (Clip + Cast, ONNX ops) holds Clip's float32 output while it
    encodes; the graph shows it once rewritten, the virtual curve does not. Native bits (a sign mask packed by
    MatMulInteger, unpacked by Gather) hold the mask as uint8 and the int32 byte sums while they encode (n + n/2
    bytes for n elements, 3/8 of the float32 bytes) and the int32 table indices while they decode (n/2). Native
    maxpool (``nbytes`` of int64 indices) holds one more int64 copy while it encodes and while it decodes."""
    if native == "bits":
        return nbytes * 3 // 8, nbytes // 8
    if native == "maxpool":
        # int64 indices (nbytes): one more int64 tensor beside the indices while the encoder runs (Mod's output
        # beside them, then Sub's beside it) and beside the decoded ones while the decoder does (the first Add's
        # output; passes/maxpool_index.encode_native_pool)
        return nbytes, nbytes
    if native:
        return nbytes, 0
    key = json.dumps({k: v for k, v in params.items()}, sort_keys=True, default=str)
    return (int(nbytes * _ratio("encode", codec, key)), int(nbytes * _ratio("decode", codec, key)))


_RATIOS: dict[tuple[str, str, str], float] = {}


def _ratio(direction: str, codec: str, params: str) -> float:
    """Bytes held per float32 input byte, measured once per (direction, codec, params)."""
    from .predict import _codec_workspace

    k = (direction, codec, params)
    if k not in _RATIOS:
        nbytes = int(np.prod(_CANONICAL)) * 4
        _RATIOS[k] = _codec_workspace(direction, codec, params, _CANONICAL) / nbytes
    return _RATIOS[k]
