"""Pass: hold the tensor ReluGrad reads as one sign bit per element (Gist's Binarize)."""
from __future__ import annotations

from ..analysis import GraphAnalysis, StashedTensor
from ..analysis.patterns import SIGNBITS
from .encode_stash import EncodeStashPass, Encoding


class SignBitsPass(EncodeStashPass):
    name = "signbits"
    encoding = SIGNBITS

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        graph = analysis.model.graph
        if any(graph.node[c].op_type != "ReluGrad" for c in stash.backward_consumers):
            return "read by a backward op other than ReluGrad: the sign alone is not enough"
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
