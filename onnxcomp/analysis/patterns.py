"""Stash patterns: how a stashed tensor is made in forward and used in backward, and which encodings apply.

Gist (Fig. 3/6) reasons about the layer pair around a stash; here the pair is read off ORT's real gradient
ops. A pattern is ``<forward role>→<backward consumer op(s)>``, e.g. ``Relu-input→ReluGrad``.
"""
from __future__ import annotations

from dataclasses import dataclass

# Encoding names (the codec / policy that would hold the tensor). Lossless first.
SIGNBITS = "signbits"            # 1 bit/elem: ReluGrad only tests x > 0 (Gist Binarize)
MAXPOOL_INDEX = "maxpool_index"  # in-window offset of MaxPool's argmax, ⌈log2(kh·kw)⌉ bits
SPARSE = "sparse"                # ZVC bitmap or narrow-index CSR, chosen by measured density (Gist SSDC)
DPR = "dpr"                      # delayed precision reduction (lossy)
ERROR_BOUNDED = "error_bounded"  # SZ-style, error-bounded (lossy)
BITMASK = "bitmask"              # a Dropout keep-mask as 1 bit/elem instead of a byte (exact)
RECOMPUTE = "recompute"          # rebuilt exactly in backward from tensors kept anyway (passes/transformer.py)

LOSSLESS = (SIGNBITS, MAXPOOL_INDEX, SPARSE, BITMASK)

# Outputs of these ops are non-negative with many exact zeros, i.e. sparse after a ReLU.
_SPARSE_PRODUCERS = {"Relu", "MaxPool", "LeakyRelu", "Clip"}  # Clip: ReLU6 in MobileNetV2
_POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
_PASS_THROUGH = {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}


@dataclass(frozen=True)
class StashUse:
    """What the analysis knows about one stashed tensor's two ends."""
    producer_op: str                 # op type of the forward producer ("" for a graph input)
    producer_output: int             # which output of the producer
    forward_consumer_ops: tuple[str, ...]
    backward_uses: tuple[tuple[str, int], ...]   # (op type, input slot) of each backward consumer
    float_tensor: bool
    sparse_source: str | None = None  # op type that makes it sparse, seen through pass-through ops
    view_source: str | None = None    # first op upstream that is not a Reshape/Transpose view (transformers)
    input_producer: str | None = None  # op type that made the producer's first input


# Transformer ops (ORT's names after its fusions) and the views that sit between them and a MatMul/Gemm.
_LAYERNORMS = {"LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"}
_GELUS = {"Gelu", "FastGelu", "BiasGelu", "QuickGelu"}
_DROPOUTS = {"Dropout", "BiasDropout", "BitmaskDropout"}
_VIEWS = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
# Backward ops that read a tensor only to form a weight or input gradient by a product.
_PRODUCT_GRADS = {"Gemm", "MatMul", "FusedMatMul", "TransposeMatMul", "FusedGemm"}


def _transformer_role(use: StashUse) -> str | None:
    src = use.view_source if use.producer_op in _VIEWS else use.producer_op
    if use.producer_op in _DROPOUTS and use.producer_output == 1:
        return "Dropout-mask"
    if use.producer_op in _LAYERNORMS and use.producer_output > 0:
        return "LayerNorm-stats"
    if src in _LAYERNORMS:
        return "LayerNorm-output"
    if src in _GELUS:
        return "Gelu-output"
    if src == "Softmax" or (src in _DROPOUTS and use.producer_op not in _VIEWS
                            and any(op in _PRODUCT_GRADS for op, _ in use.backward_uses)):
        # The attention probabilities (after dropout: what P·V's backward reads for dV).
        return "Softmax-output" if src == "Softmax" else "Dropout-output"
    return None


def forward_role(use: StashUse) -> str:
    transformer = _transformer_role(use)
    if transformer is not None:
        return transformer
    if use.producer_op == "MaxPool" and use.producer_output == 1:
        return "MaxPool-indices"
    if use.producer_op == "Relu":
        return "Relu-output"  # ORT's ReluGrad may read the output (Y > 0 ⇔ X > 0)
    if any(op == "ReluGrad" and slot == 1 for op, slot in use.backward_uses):
        return "Relu-input"
    if use.producer_op == "BatchNormInternal" and use.producer_output > 0:
        return "BatchNorm-stats"
    if use.producer_op:
        return f"{use.producer_op}-output"
    return "graph-input"


def pattern_of(use: StashUse) -> str:
    consumers = "/".join(sorted({op for op, _ in use.backward_uses}))
    return f"{forward_role(use)}→{consumers}"


def applicable_encodings(use: StashUse) -> tuple[str, ...]:
    """Encodings that keep every backward consumer's result exact (lossless) or bounded (lossy)."""
    role = forward_role(use)
    if role == "MaxPool-indices":
        return (MAXPOOL_INDEX,)
    if role == "Dropout-mask":
        return (BITMASK,)
    if role == "LayerNorm-stats":
        return ()   # [..., 1] per row: nothing to gain
    attention_dropout = role == "Dropout-output" and use.input_producer == "Softmax"
    attention_probs = role == "Softmax-output" and any(op.startswith("SoftmaxGrad") for op, _ in use.backward_uses)
    if (role in ("LayerNorm-output", "Gelu-output") or attention_dropout or attention_probs) and use.float_tensor:
        # Exact: rebuilt from the LayerNorm / GELU input that LayerNormalizationGrad / GeluGrad keep anyway,
        # or from the softmax output and the Dropout mask that SoftmaxGrad / DropoutGrad keep anyway, or
        # (the softmax output itself) from Q and Kᵀ, which the dQ / dK products keep anyway.
        return (RECOMPUTE, DPR, ERROR_BOUNDED)
    if not use.float_tensor or role == "BatchNorm-stats":
        return ()
    ops = {op for op, _ in use.backward_uses}
    if ops == {"ReluGrad"}:
        # Only the sign is read; 1 bit is exact and beats anything lossy.
        return (SIGNBITS,)
    encodings: list[str] = []
    if use.sparse_source is not None:
        encodings.append(SPARSE)
    encodings += [DPR, ERROR_BOUNDED]
    return tuple(encodings)


def sparse_source(producer_op: str, upstream_ops: list[str]) -> str | None:
    """The op that makes a tensor sparse, looking through reshapes and pools (pool of ReLU is sparse)."""
    for op in [producer_op, *upstream_ops]:
        if op in _SPARSE_PRODUCERS and op not in _POOLS:
            return op
        if op in _PASS_THROUGH or op in _POOLS:
            continue
        return None
    return None


def view_source(producer_op: str, upstream_ops: list[str]) -> str | None:
    """The first op at or above the producer that is not a view (Reshape/Transpose/...), if in reach."""
    for op in [producer_op, *upstream_ops]:
        if op not in _VIEWS:
            return op
    return None
