"""Pass: hold the tensor ReluGrad reads as one sign bit per element (Gist's Binarize).

With ``mask`` (the default) the bits decode to a one-byte boolean mask (the ``bitmask`` codec packing ORT's
``Greater(X, 0)``: the same bits as ``relumask`` without a float copy into the PyOp bridge), and each
ReluGrad(dY, X) reading it reads ``Cast(mask, float)`` instead (1.0 where X > 0: ReluGrad only tests
X > 0, so the result is bit-identical). The PyOp bridge then copies a quarter of the bytes of a float
decode. Where(mask, dY, 0) would be one op fewer, but ORT's CPU Where allocates two output-sized
temporaries (ResNet-18 stem, batch 32 at 64x64: +17 MiB at that node, measured with
tools/memory_timeline.py); the native Cast and ReluGrad allocate only their outputs.
"""
from __future__ import annotations

import onnx_ir as ir

from ..analysis import GraphAnalysis, StashedTensor, numel
from ..analysis.patterns import SIGNBITS, sign_readers
from ..custom_ops import contract
from .editor import IrGraphEditor
from .encode_stash import EncodeStashPass, Encoding, is_native_bits_decode, native_bits_problem


class SignBitsPass(EncodeStashPass):
    """``split_readers``: also take stashes that ReluGrad reads beside other backward ops (a ReLU output
    feeding the next conv): ReluGrad gets the sign bits, the other readers are left to a later (lossy)
    pass — a lossy copy could flip a tiny positive value to zero and change ReluGrad's mask. The lossless
    policy leaves such stashes whole to the sparse pass instead, whose exact copy serves both readers."""

    name = "signbits"
    encoding = SIGNBITS

    def __init__(self, split_readers: bool = False, mask: bool = True, native: bool = True) -> None:
        self.split_readers = split_readers
        # ``native`` (mask form only): pack and unpack the bits with standard ONNX ops (MatMulInteger, Gather;
        # encode_stash._encode_native_bits) instead of the bitmask PyOps: the same bits and the same bool
        # mask, without the PyOp bridge's copies of the mask into and out of Python (ResNet-18-sized
        # [32, 64, 32, 32] mask round trip, ORT defaults: 6.5 vs 9.6 ms CPU, no transient above the pattern
        # vs 12 MiB; `docs/notes/nativebits.md`). Tensors whose element count is not a multiple of 8 keep the PyOp.
        self.native = native
        self.codec = "relumask" if mask else "signbits"
        # The mask form: ORT tests X > 0 in the graph (Greater, one byte per element) and the ``bitmask``
        # codec packs those booleans: the same bits and the same bool decode as ``relumask``, but the PyOp
        # bridge copies a bool input instead of a float one (encode_stash.Encoding.sign_test).
        self._sign_test = mask
        self._held_codec = "bitmask" if mask else "signbits"

    def finish(self, model: ir.Model) -> None:
        if self.codec == "relumask":
            _relugrad_reads_float_mask(model.graph)

    def applies(self, stash: StashedTensor) -> bool:
        if self.encoding in stash.encodings:
            return True
        return self.split_readers and stash.use.float_tensor and bool(sign_readers(stash.use))

    def select(self, analysis: GraphAnalysis, stash: StashedTensor) -> Encoding | str:
        graph = analysis.model.graph
        signs = sign_readers(stash.use)  # ReluGrad, LeakyReluGrad (analysis.patterns.GRADIENT_NEEDS)
        others = {graph.node[c].op_type for c in stash.backward_consumers} - signs
        if others and not self.split_readers:
            return (f"read by {sorted(others)} besides {sorted(signs)}: the sign alone is not enough")
        if others:
            # Only ReluGrad switches to the sign bits; the encoder reads the stash itself (its other
            # readers keep it alive anyway), so no Relu-output substitution.
            shape = stash.shape
            if shape is None:
                return "shape unresolved"
            if stash.dtype != "float32":
                return f"dtype {stash.dtype}: the signbits op takes float32"
            return self._held(Encoding(stash.name, stash.name, stash.name, self._held_codec, {},
                              [(numel(shape) + 7) // 8, 8 * len(shape)], _payload_shapes(shape),
                              f"sign bits for {'/'.join(sorted(signs))} only; {sorted(others)} left to later "
                              "passes", readers=tuple(sorted(signs)), sign_test=self._sign_test), shape)
        if stash.use.float_tensor is False or stash.dtype != "float32":
            return f"dtype {stash.dtype}: the signbits op takes float32"
        codec_bytes = lambda shape: [(numel(shape) + 7) // 8, 8 * len(shape)]  # noqa: E731
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
        return self._held(Encoding(stash.name, target, target, self._held_codec, {}, codec_bytes(shape),
                                   _payload_shapes(shape), note, sign_test=self._sign_test), shape)

    def _held(self, enc: Encoding, shape: tuple[int, ...]) -> Encoding:
        """The encoding, held natively (standard ops) where the pass may and the tensor allows it."""
        n = numel(shape)
        if not (self.native and self._sign_test) or native_bits_problem(n) is not None:
            return enc
        enc.native = "bits"
        enc.payload_bytes, enc.payload_shapes = [n // 8], [[n // 8, 1]]
        enc.note += " (native: MatMulInteger pack, Gather unpack)"
        return enc


# Gradient ops that test only X > 0 of the input they get: fed Cast(mask, float), they compute the same bits
# (LeakyReluGrad(dY, Y, alpha) = Y > 0 ? dY : alpha·dY, checked on ORT 1.19 with 0, -0, NaN, subnormals).
_SIGN_GRADS = {"ReluGrad", "LeakyReluGrad"}


def _payload_shapes(shape: tuple[int, ...]) -> list[list[int] | None]:
    """Declared shapes of the bits and the int64 shape payload. The shape payload is left symbolic: with two
    or more encoders whose int64[ndim] outputs (payload shape and anchor) are both declared static, ORT 1.19's
    memory-reuse planner (on by default) aborts the step ("Shape mismatch attempting to re-use buffer.
    {4} != {9}"), measured on leaky_vgg, mobilenet_v1_s and a MobileNetV3-style net."""
    return [[(numel(shape) + 7) // 8], None]


def _relugrad_reads_float_mask(graph: ir.Graph) -> None:
    """ReluGrad(dY, mask) → ReluGrad(dY, Cast(mask, float)) for every ReluGrad (or LeakyReluGrad) fed by a
    relumask or bitmask (sign-test) decoder, PyOp or native; one Cast per mask, just before its first such
    reader."""
    editor = IrGraphEditor(graph, taken=set(), prefix="")
    order: dict[ir.Node, int] | None = None
    mask_decoders = {contract.decode_op("relumask"), contract.decode_op("bitmask")}
    for decoder in [n for n in graph if (n.op_type in mask_decoders and n.domain == contract.DOMAIN)
                    or is_native_bits_decode(n)]:
        mask = decoder.outputs[contract.DECODER_OUTPUT]
        uses = [u for u in mask.uses() if u.node.op_type in _SIGN_GRADS and u.idx == 1]
        if not uses:
            continue
        order = order or {n: i for i, n in enumerate(graph)}
        first = min((u.node for u in uses), key=order.__getitem__)
        shape = list(mask.shape) if mask.shape is not None else None
        cast = editor.node("Cast", [mask], [(f"{mask.name}__as_float", ir.DataType.FLOAT, shape)],
                           name=f"{mask.name}__as_float__cast", to=ir.DataType.FLOAT)
        graph.insert_before(first, cast)
        for u in uses:
            u.node.replace_input_with(u.idx, cast.outputs[0])
