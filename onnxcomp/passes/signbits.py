"""Pass: hold the tensor ReluGrad reads as one sign bit per element (Gist's Binarize).

With ``mask`` (the default) the bits decode to a one-byte boolean mask (codec ``relumask``) and each
ReluGrad(dY, X) reading it becomes Where(mask, dY, 0) — bit-identical (dY where X > 0, +0 elsewhere, NaN dY
included), with a quarter of the bytes of a float 1.0/0.0 copy alive while the gradient is formed.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ..analysis import GraphAnalysis, StashedTensor
from ..analysis.patterns import SIGNBITS
from .base import PassResult
from .encode_stash import EncodeStashPass, Encoding, decode_op_type


class SignBitsPass(EncodeStashPass):
    """``split_readers``: also take stashes that ReluGrad reads beside other backward ops (a ReLU output
    feeding the next conv): ReluGrad gets the sign bits, the other readers are left to a later (lossy)
    pass — a lossy copy could flip a tiny positive value to zero and change ReluGrad's mask. The lossless
    policy leaves such stashes whole to the sparse pass instead, whose exact copy serves both readers."""

    name = "signbits"
    encoding = SIGNBITS

    def __init__(self, split_readers: bool = False, mask: bool = True) -> None:
        self.split_readers = split_readers
        self.codec = "relumask" if mask else "signbits"

    def run(self, model: onnx.ModelProto) -> PassResult:
        result = super().run(model)
        if self.codec == "relumask" and result.modified:
            _relugrad_to_where(result.model)
        return result

    def applies(self, stash: StashedTensor) -> bool:
        if self.encoding in stash.encodings:
            return True
        return self.split_readers and stash.use.float_tensor and "ReluGrad" in stash.backward_consumer_ops

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        graph = analysis.model.graph
        others = {graph.node[c].op_type for c in stash.backward_consumers} - {"ReluGrad"}
        if others and not self.split_readers:
            return "read by a backward op other than ReluGrad: the sign alone is not enough"
        if others:
            # Only ReluGrad switches to the sign bits; the encoder reads the stash itself (its other
            # readers keep it alive anyway), so no Relu-output substitution.
            shape = stash.shape
            if shape is None:
                return "shape unresolved"
            if stash.dtype != "float32":
                return f"dtype {stash.dtype}: the signbits op takes float32"
            return Encoding(stash.name, stash.name, stash.name, self.codec, {},
                            [(_numel(shape) + 7) // 8, 8 * len(shape)], [[(_numel(shape) + 7) // 8], [len(shape)]],
                            f"sign bits for ReluGrad only; {sorted(others)} left to later passes",
                            readers=("ReluGrad",))
        if stash.use.float_tensor is False or stash.dtype != "float32":
            return f"dtype {stash.dtype}: the signbits op takes float32"
        codec_bytes = lambda shape: [(_numel(shape) + 7) // 8, 8 * len(shape)]  # noqa: E731
        target = stash.name
        fwd = [graph.node[c] for c in stash.forward_consumers]
        # Encode Relu's output when Relu is X's only forward reader: Y > 0 ⇔ X > 0, and X is then freed
        # right after Relu instead of being kept until the encoder has run.
        note = "encodes the ReLU input"
        if len(fwd) == 1 and fwd[0].op_type == "Relu":
            target = fwd[0].output[0]
            note = "encodes the ReLU output (same signs as its input)"
        shape = stash.shape
        if shape is None:
            return "shape unresolved"
        return Encoding(stash.name, target, target, self.codec, {}, codec_bytes(shape),
                        [[(_numel(shape) + 7) // 8], [len(shape)]], note)


_ZERO = "onnxcomp_zero_f32"


def _relugrad_to_where(model: onnx.ModelProto) -> None:
    """ReluGrad(dY, mask) → Where(mask, dY, 0) for every ReluGrad fed by a relumask decoder."""
    masks = {n.output[0] for n in model.graph.node if n.op_type == decode_op_type("relumask")}
    changed = False
    for node in model.graph.node:
        if node.op_type == "ReluGrad" and node.input[1] in masks:
            d_y, mask = node.input[0], node.input[1]
            where = helper.make_node("Where", [mask, d_y, _ZERO], list(node.output), name=node.name or None)
            node.CopyFrom(where)
            changed = True
    if changed and not any(i.name == _ZERO for i in model.graph.initializer):
        model.graph.initializer.append(helper.make_tensor(_ZERO, TensorProto.FLOAT, [], [0.0]))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
