"""The contract between the graph passes that insert onnxcomp's custom ops and the runtime that runs them.

One place says what an encode/decode pair looks like in a graph, so the rewrite (onnxcomp.passes), the
PyOp registration (onnxcomp.runtime.codec_ops), the bound controller (onnxcomp.runtime.controller) and the
passes that read other passes' work (recompute) agree by construction:

- domain ``ai.onnx.contrib`` (onnxruntime-extensions puts every PyOp there), op types
  ``OnnxcompEncode_<codec>`` / ``OnnxcompDecode_<codec>`` for every codec in ``custom_ops.REGISTRY``;
- encoder: input slot 0 is the tensor X; outputs are the codec's payload arrays (``Codec.payload_names``
  order), then the *anchor* (int64 shape of X) as the last output;
- decoder: inputs are the payload arrays, then the *trigger* (a float tensor the op ignores; it times the
  decoder) as the last input; output slot 0 is the decoded tensor;
- one string attribute ``params`` holding canonical JSON: codec keywords plus the control keys below,
  which the runtime strips before calling the codec;
- the op-set version below, written into the model's metadata by every pass that inserts these ops. A
  graph written under another op-set version is refused with one line, never half-run.

Adding an encoding is one codec file (``custom_ops/<codec>.py``, registered in ``REGISTRY``), one pass file
(``onnxcomp/passes/<name>.py``) and, when it needs controller-only params, one entry in CONTROL_PARAMS.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

DOMAIN = "ai.onnx.contrib"
DOMAIN_VERSION = 1
# Version of the layout above. Bump it whenever slots, params keys or op naming change incompatibly.
OPSET_VERSION = 1
OPSET_METADATA_KEY = "onnxcomp.opset"
PARAMS_ATTR = "params"
ENCODE_PREFIX = "OnnxcompEncode_"
DECODE_PREFIX = "OnnxcompDecode_"

# Encoder slots.
ENCODER_INPUT = 0            # X
ENCODER_ANCHOR = -1          # int64 shape of X (the last output)
# Decoder slots.
DECODER_TRIGGER = -1         # the float input that times the decoder (the last input)
DECODER_OUTPUT = 0           # the decoded tensor

# Bookkeeping params the passes add for the run-time bound controller; codecs never see them.
CONTROL_PARAMS = frozenset({
    "key",        # error-bounded layer id (the stash name): the controller's per-layer state
    "weight",     # the layer's weight parameter, whose gradient scale M the controller reads
    "batch",      # batch size of the layer input
    "adaptive",   # bool: the controller may retune eb
    "dy_numel",   # elements of dY, with an l2 trigger (the trigger is ReduceL2(dY))
    "out_spatial",
    "summed",     # dY·X products summed into one weight-gradient value (MatMul/Gemm layers; conv: from dY)
    "tensor",     # the stash's name, for op error messages
    "max_bytes",  # the payload bytes the planner sized the stash to: the encoder loosens eb to stay within
    "store",      # "inline": the payload store holds the payload and ORT carries a token frame, whatever the
                  # run's store mode (a payload whose size depends on the data is allocated outside ORT's
                  # memory pattern otherwise: passes/encode_stash.py)
})
# The param the controller overrides at run time (COMET's error bound).
ERROR_BOUND_PARAM = "eb"


class OpsetMismatch(ValueError):
    """A graph written under another onnxcomp op-set version."""


def encode_op(codec: str) -> str:
    return f"{ENCODE_PREFIX}{codec}"


def decode_op(codec: str) -> str:
    return f"{DECODE_PREFIX}{codec}"


@dataclass(frozen=True)
class CodecOp:
    role: Literal["encode", "decode"]
    codec: str


def _codec_ops() -> dict[str, CodecOp]:
    from .base import REGISTRY

    ops: dict[str, CodecOp] = {}
    for name in REGISTRY:
        ops[encode_op(name)] = CodecOp("encode", name)
        ops[decode_op(name)] = CodecOp("decode", name)
    return ops


def codec_op(domain: str, op_type: str) -> CodecOp | None:
    """What an ONNX node (by domain and op type) is under the contract: an encoder or decoder of a
    registered codec, or None. Exact lookup in the registry, never a name-prefix match."""
    if domain != DOMAIN:
        return None
    return _codec_ops().get(op_type)


def is_encoder(domain: str, op_type: str, codec: str | None = None) -> bool:
    op = codec_op(domain, op_type)
    return op is not None and op.role == "encode" and (codec is None or op.codec == codec)


def is_decoder(domain: str, op_type: str, codec: str | None = None) -> bool:
    op = codec_op(domain, op_type)
    return op is not None and op.role == "decode" and (codec is None or op.codec == codec)


def payload_outputs(encoder: Any) -> list[str]:
    """An encoder node's payload output names (every output but the anchor)."""
    return list(encoder.output[:ENCODER_ANCHOR])


def payload_inputs(decoder: Any) -> list[str]:
    """A decoder node's payload input names (every input but the trigger)."""
    return list(decoder.input[:DECODER_TRIGGER])


def params_value(params: dict[str, Any]) -> str:
    """The ``params`` attribute value: canonical JSON (sorted keys, numpy scalars as Python)."""
    return json.dumps(params, sort_keys=True, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def parse_params(value: str | bytes | None) -> dict[str, Any]:
    if isinstance(value, bytes):
        value = value.decode()
    return json.loads(value) if value else {}


def codec_params(params: dict[str, Any]) -> dict[str, Any]:
    """The keywords the codec itself takes (control params removed)."""
    return {k: v for k, v in params.items() if k not in CONTROL_PARAMS}


def opset_problem(metadata: dict[str, str]) -> str | None:
    """Why a graph cannot be run or rewritten by this version, or None.

    Graphs written before the op-set was recorded used exactly the version-1 layout, so a graph with
    no record counts as version 1."""
    raw = metadata.get(OPSET_METADATA_KEY)
    if raw is None:
        return None
    try:
        version = int(raw)
    except ValueError:
        return f"metadata {OPSET_METADATA_KEY}={raw!r} is not an op-set version number"
    if version != OPSET_VERSION:
        return (f"written by onnxcomp custom-op set version {version}, but this onnxcomp reads version "
                f"{OPSET_VERSION}; transform the original training graph again with this onnxcomp")
    return None
