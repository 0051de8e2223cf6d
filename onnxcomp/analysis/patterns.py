"""Stash patterns: how a stashed tensor is made in forward and used in backward, and which encodings apply.

Gist (Fig. 3/6) reasons about the layer pair around a stash; here the pair is read off ORT's real gradient
ops. A pattern is ``<forward role>→<backward consumer op(s)>``, e.g. ``Relu-input→ReluGrad``.

Which techniques apply is decided by what each backward reader's *gradient* needs of the tensor it reads
(``GRADIENT_NEEDS``, keyed on the gradient op and input slot, not on forward op names): a sign, an interval
membership, a mask, an in-window index, or the values (and then whether an error reaches only a weight
gradient). ``technique_table`` gives every technique with why it applies or why not (``onnxcomp inspect``);
``applicable_encodings`` (``StashedTensor.encodings``, what the planners enumerate) lists the whole-stash
encodings among those that apply. docs/coverage.md has the table and what ORT 1.19's gradient builder stashes per activation.
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
INTERVAL_MASK = "intervalmask"   # 1 bit/elem: the Clip gradient reads only lo <= X <= hi (passes/interval_mask.py)

LOSSLESS = (SIGNBITS, INTERVAL_MASK, MAXPOOL_INDEX, SPARSE, BITMASK)
# Every technique `inspect` reports on, exact ones first.
TECHNIQUES = (SIGNBITS, INTERVAL_MASK, BITMASK, MAXPOOL_INDEX, SPARSE, RECOMPUTE, DPR, ERROR_BOUNDED)

# Outputs of these ops are non-negative with many exact zeros, i.e. sparse after a ReLU. (Not LeakyRelu: its
# negative side is alpha·x, not zero.)
_SPARSE_PRODUCERS = {"Relu", "MaxPool", "Clip"}  # Clip: ReLU6 in MobileNetV2
_POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
_PASS_THROUGH = {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}
# Ops a stash is seen through to the tensors it is built from: views, and data movement that neither
# creates nor changes values (Concat/Split/Slice/Pad with zeros keep a ReLU output's zeros and signs).
SEE_THROUGH = {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
               "Slice", "Pad"}


@dataclass(frozen=True)
class GradientNeed:
    """What one backward reader's gradient needs of the stashed tensor it reads."""
    kind: str        # "sign" | "interval" | "mask" | "index" | "weight-grad" | "values" | "stats" | "shape"
    why: str


# (backward op, input slot reading the stash) → what its gradient needs. ORT 1.19's gradient builder and CPU
# kernels (checked: LeakyReluGrad(dY, Y, alpha) = Y > 0 ? dY : alpha·dY, Y = 0 and NaN included).
GRADIENT_NEEDS: dict[tuple[str, int], GradientNeed] = {
    ("ReluGrad", 1): GradientNeed("sign", "ReluGrad tests X > 0 only"),
    ("LeakyReluGrad", 1): GradientNeed("sign", "LeakyReluGrad reads the output Y and tests Y > 0 only"),
    ("DropoutGrad", 1): GradientNeed("mask", "DropoutGrad reads the keep-mask booleans"),
    ("MaxPoolGrad", 1): GradientNeed("index", "MaxPoolGrad reads argmax positions inside their windows"),
    ("ConvGrad", 1): GradientNeed("weight-grad", "ConvGrad reads X for dW = dY ⋆ X only"),
    ("Gemm", 0): GradientNeed("weight-grad", "a Gemm gradient reads X for dW only"),
    ("Gemm", 1): GradientNeed("weight-grad", "a Gemm gradient reads X for dW only"),
    ("MatMul", 0): GradientNeed("weight-grad", "a MatMul gradient reads X for dW only"),
    ("MatMul", 1): GradientNeed("weight-grad", "a MatMul gradient reads X for dW only"),
    ("BatchNormalizationGrad", 1): GradientNeed("values", "BatchNormalizationGrad reads X to form x̂ for dγ "
                                                "and dX: an error reaches the input gradient"),
    ("BatchNormalizationGrad", 3): GradientNeed("stats", "saved mean"),
    ("BatchNormalizationGrad", 4): GradientNeed("stats", "saved inverse std"),
}
# The Clip gradient (GetClipGradient): Cast(And(GreaterOrEqual(X, min), LessOrEqual(X, max)), float) · dY.
# Its float 0/1 mask is what backward reads; it needs only whether X lies in [min, max].
_CLIP_PREDICATES = {"And", "GreaterOrEqual", "LessOrEqual"}
# ORT 1.19.2 registers no gradient for these (generate_artifacts fails): they never reach a training graph.
NO_ORT_GRADIENT = ("PRelu", "HardSigmoid", "HardSwish", "Elu")


def gradient_need(op: str, slot: int) -> GradientNeed:
    return GRADIENT_NEEDS.get((op, slot), GradientNeed("values", f"{op} reads the values"))


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
    # Op types of the tensors the stash is built from, seen through views, Concat/Split/Slice/Pad and pools
    # (one entry per source; empty when unknown).
    sources: tuple[str, ...] = ()


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
    if _is_clip_mask(use):
        return "Clip-mask"
    if use.producer_op:
        return f"{use.producer_op}-output"
    return "graph-input"


def pattern_of(use: StashUse) -> str:
    consumers = "/".join(sorted({op for op, _ in use.backward_uses}))
    return f"{forward_role(use)}→{consumers}"


def _is_clip_mask(use: StashUse) -> bool:
    """The Clip gradient's float 0/1 mask: Cast of GreaterOrEqual / LessOrEqual / their And."""
    return use.producer_op == "Cast" and use.input_producer in _CLIP_PREDICATES and use.float_tensor


def needs(use: StashUse) -> tuple[GradientNeed, ...]:
    """What the backward readers' gradients need of this stash (one entry per reader)."""
    if _is_clip_mask(use):
        return tuple(GradientNeed("interval", "the Clip gradient's 0/1 mask: only min <= X <= max of its input")
                     for _ in use.backward_uses)
    return tuple(gradient_need(op, slot) for op, slot in use.backward_uses)


def sign_readers(use: StashUse) -> set[str]:
    """Backward ops reading this stash whose gradient needs only its sign (ReluGrad, LeakyReluGrad)."""
    return {op for op, slot in use.backward_uses if gradient_need(op, slot).kind == "sign"}


def technique_table(use: StashUse) -> dict[str, str | None]:
    """Every technique → None where it applies, else one short reason why not. ``applicable_encodings``
    draws from the techniques mapped to None (sign bits for only some readers are the split-reader pass's)."""
    role = forward_role(use)
    kinds = {n.kind for n in needs(use)}
    sign_ops = sign_readers(use)
    ops = {op for op, _ in use.backward_uses}
    out: dict[str, str | None] = {t: None for t in TECHNIQUES}
    exact_mask = bool(kinds) and kinds <= {"sign", "interval", "mask", "index"}

    def refuse(technique: str, why: str) -> None:
        out[technique] = why

    # Sign bits: every reader (or, split, some readers) tests only the sign.
    if not sign_ops:
        refuse(SIGNBITS, "no reader's gradient tests only the sign (ReluGrad, LeakyReluGrad)")
    elif not use.float_tensor:
        refuse(SIGNBITS, "not a float tensor")
    if "interval" not in kinds:
        refuse(INTERVAL_MASK, "not the Clip gradient's mask (it needs min <= X <= max of the Clip input)")
    if "mask" not in kinds:
        refuse(BITMASK, "not a Dropout keep-mask")
    if "index" not in kinds:
        refuse(MAXPOOL_INDEX, "not MaxPool argmax indices")
    # Value encodings.
    if exact_mask:
        why = {"sign": "the sign bits", "interval": "1 bit per element (interval mask)",
               "mask": "1 bit per element", "index": "in-window offsets"}
        best = why[sorted(kinds)[0]]
        for t in (SPARSE, RECOMPUTE, DPR, ERROR_BOUNDED):
            refuse(t, f"its readers need only {best}: an exact, smaller form")
        return out
    if "stats" in kinds:
        for t in (SPARSE, RECOMPUTE, DPR, ERROR_BOUNDED):
            refuse(t, "per-channel statistics: a few bytes, nothing to gain")
        return out
    if not use.float_tensor:
        for t in (SPARSE, DPR, ERROR_BOUNDED):
            refuse(t, "not a float tensor")
    elif use.sparse_source is None:
        refuse(SPARSE, "not made sparse by ReLU/ReLU6/MaxPool-of-ReLU (seen through views, Concat, Pad)")
    if role in ("LayerNorm-output", "Gelu-output") or role == "Softmax-output" or (
            role == "Dropout-output" and use.input_producer == "Softmax"):
        pass  # transformer recomputation (passes/transformer.py)
    else:
        refuse(RECOMPUTE, f"made by {use.producer_op or 'a graph input'}: rebuilt only for LayerNorm/GELU/"
                          "attention outputs (cheap CNN layers: the recompute policy, not per stash)")
    value_readers = {op for op, slot in use.backward_uses if gradient_need(op, slot).kind not in ("sign",)}
    if use.float_tensor and value_readers - {"ConvGrad", "Gemm", "MatMul", "BatchNormalizationGrad"}:
        # BatchNorm inputs stay candidates: under a lossy budget an error-bounded x̂ is a planner's choice
        # (comet's fixed recipe gives them DPR: its bound is derived for weight-gradient inputs).
        refuse(ERROR_BOUNDED, f"{sorted(value_readers)} would carry an error into an input gradient; "
                              "DPR's relative error is the bounded choice")
    return out


def applicable_encodings(use: StashUse) -> tuple[str, ...]:
    """Encodings that keep every backward consumer's result exact (lossless) or bounded (lossy)."""
    role = forward_role(use)
    if role == "MaxPool-indices":
        return (MAXPOOL_INDEX,)
    if role == "Dropout-mask":
        return (BITMASK,)
    if role == "Clip-mask":
        return (INTERVAL_MASK,)
    if role == "LayerNorm-stats":
        return ()   # [..., 1] per row: nothing to gain
    attention_dropout = role == "Dropout-output" and use.input_producer == "Softmax"
    attention_probs = role == "Softmax-output" and any(op.startswith("SoftmaxGrad") for op, _ in use.backward_uses)
    if (role in ("LayerNorm-output", "Gelu-output") or attention_dropout or attention_probs) and use.float_tensor:
        # Exact: rebuilt from the LayerNorm / GELU input that LayerNormalizationGrad / GeluGrad keep anyway,
        # or from the softmax output and the Dropout mask that SoftmaxGrad / DropoutGrad keep anyway, or
        # (the softmax output itself) from Q and Kᵀ, which the dQ / dK products keep anyway.
        table = technique_table(use)
        return tuple(t for t in (RECOMPUTE, DPR, ERROR_BOUNDED) if table[t] is None)
    if not use.float_tensor or role == "BatchNorm-stats":
        return ()
    ops = {op for op, _ in use.backward_uses}
    if ops and ops == sign_readers(use):
        # Only the sign is read (ReluGrad, LeakyReluGrad); 1 bit is exact and beats anything lossy.
        return (SIGNBITS,)
    table = technique_table(use)
    return tuple(t for t in (SPARSE, DPR, ERROR_BOUNDED) if table[t] is None)


def sparse_source(producer_op: str, upstream_ops: list[str], sources: tuple[str, ...] = ()) -> str | None:
    """The op that makes a tensor sparse, looking through reshapes and pools (pool of ReLU is sparse); with
    ``sources`` (the ops the tensor is built from, through Concat/Pad/...), sparse when every source is."""
    for op in [producer_op, *upstream_ops]:
        if op in _SPARSE_PRODUCERS and op not in _POOLS:
            return op
        if op in _PASS_THROUGH or op in _POOLS:
            continue
        break
    # Through Concat/Split/Slice/Pad too: sparse when every tensor it is built from comes out of a ReLU/ReLU6.
    found = set(sources)
    if producer_op in SEE_THROUGH and len(found) == 1 and found <= _SPARSE_PRODUCERS - _POOLS:
        return found.pop()
    return None


def view_source(producer_op: str, upstream_ops: list[str]) -> str | None:
    """The first op at or above the producer that is not a view (Reshape/Transpose/...), if in reach."""
    for op in [producer_op, *upstream_ops]:
        if op not in _VIEWS:
            return op
    return None
