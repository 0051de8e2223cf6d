"""Pass: declare the static shapes onnxcomp's analysis knows, so ORT's memory pattern places those tensors.

ORT plans its memory pattern (session option mem pattern, on by default) from the shapes its graph carries
after its own shape inference. A tensor whose shape it cannot resolve there is "allocated dynamically"
(session_state.cc, ``GeneratePatternGroupCache``: "Could not resolve shape for tensor ... will allocate
dynamically"): from the arena, outside the pattern's block, during the step. ORT 1.19's inference leaves
several gradient-builder outputs without a shape although they are static — the ReLU6 (Clip) gradient's
``GreaterOrEqual``/``LessOrEqual``/``And``/``Cast`` mask, a ``Scale`` of GlobalAveragePool's gradient, the
classifier's ``Gemm`` logits, onnxcomp's own trigger ``Reshape``s (ORT's optimized graph written with
``SessionOptions.optimized_model_filepath`` has no shape for them).

Under ORT's defaults that is what holds the pattern block twice (passes/arena_scratch.py explains the arena's
mechanics): the block fills an arena region of its own, a dynamic allocation too large for the free chunks
left elsewhere opens a second region, and the next step's block goes there. MobileNetV2 ``auto --exact``
(b32, 64×64): the head's ReLU6-gradient mask, ``Cast`` to float ([32, 1280, 2, 2], 640 KiB) was that
allocation; ORT-defaults growth 208.1 MiB, 116.3 MiB with the shapes declared (docs/notes, NOTES-cnndefaults).

The pass adds nothing to the computation: it sets the type and shape of node outputs that have none (or a
symbolic one) to what the analysis inferred, for outputs of ORT's own kernels (ONNX and com.microsoft
domains). It leaves alone custom-op outputs (a PyOp's output shape is what the op returns at run time),
payloads whose size depends on the data (the analysis has only a size hint for them), and graph outputs.
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .records import PassRecord

# Domains whose kernels ORT runs itself (their output shapes follow from the op, as the analysis infers them).
_ORT_DOMAINS = ("", "ai.onnx", "com.microsoft")


def _static(shape: ir.Shape | None) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def undeclared_static(model: ir.Model) -> list[tuple[ir.Value, tuple[int, ...], ir.DataType]]:
    """(value, shape, element type) for every output of an ORT-domain node whose declared shape is missing or
    not static while the analysis inferred a static one (no data-dependent size), graph outputs excepted."""
    from ..analysis.cached import analysis_of

    analysis = analysis_of(model)
    outputs = set(model.graph.outputs)
    found = []
    for node in model.graph:
        if node.domain not in _ORT_DOMAINS:
            continue
        for value in node.outputs:
            if not value.name or value in outputs or _static(value.shape):
                continue
            info = analysis.tensors.get(value.name)
            if info is None or info.type.shape is None or info.size_hint is not None or info.type.dtype is None:
                continue
            dtype = value.dtype if value.dtype is not None else ir.DataType.from_numpy(info.type.dtype)
            found.append((value, tuple(int(d) for d in info.type.shape), dtype))
    return found


class DeclareShapesPass(OnnxcompPass):
    """Declares the static shapes of node outputs ORT would otherwise allocate outside its memory pattern
    (see the module docstring). One record listing the values it declared."""

    name = "declare_shapes"
    full_check = False   # only value types/shapes change; the wiring check and ORT's load see the rest

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        found = undeclared_static(model)
        if not found:
            return outcome
        for value, shape, dtype in found:
            value.type = ir.TensorType(dtype)
            value.shape = ir.Shape(list(shape))
        nbytes = sum(int(dtype.itemsize * _count(shape)) for _, shape, dtype in found)
        outcome.records.append(PassRecord("moved", self.name, "value shapes", {
            "pass": self.name, "declared": len(found), "bytes": nbytes,
            "values": [v.name for v, _, _ in found],
            "why": "static shapes ORT's inference leaves unresolved: without them ORT allocates these tensors "
                   "outside its memory pattern, during the step"}))
        outcome.modified = True
        return outcome


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
