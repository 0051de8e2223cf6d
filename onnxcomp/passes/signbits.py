"""Pass: hold the tensor ReluGrad reads as one sign bit per element (Gist's Binarize)."""
from __future__ import annotations

from ..analysis import GraphAnalysis, StashedTensor
from ..analysis.patterns import SIGNBITS
from .encode_stash import EncodeStashPass, Encoding


class SignBitsPass(EncodeStashPass):
    """``split_readers``: also take stashes that ReluGrad reads beside other backward ops (a ReLU output
    feeding the next conv): ReluGrad gets the sign bits, the other readers are left to a later (lossy)
    pass — a lossy copy could flip a tiny positive value to zero and change ReluGrad's mask. The lossless
    policy leaves such stashes whole to the sparse pass instead, whose exact copy serves both readers."""

    name = "signbits"
    encoding = SIGNBITS

    def __init__(self, split_readers: bool = False) -> None:
        self.split_readers = split_readers

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
            return Encoding(stash.name, stash.name, stash.name, "signbits", {},
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
        return Encoding(stash.name, target, target, "signbits", {}, codec_bytes(shape),
                        [[(_numel(shape) + 7) // 8], [len(shape)]], note)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
