"""Pass: declare the static shapes a rewritten graph leaves undeclared, so ORT's memory pattern places them.

ORT plans its memory pattern (session option mem pattern, on by default) from the shapes its graph carries
after its own shape inference. A tensor left without a shape there is not traced into the pattern
(session_state.cc, ``GeneratePatternGroupCache``): it is allocated from the arena, outside the pattern's block,
during the step. ORT 1.19's inference leaves some static outputs of training graphs shapeless (found by exposing
every undeclared value of the reference training graphs as an output of an ORT session: no dims reported):

* ``GreaterOrEqual`` and ``LessOrEqual`` (ONNX function ops; ORT infers nothing for them, nor for the
  ``And``/``Cast`` reading them): the ReLU6 (Clip) gradient's mask, e.g. MobileNetV2's, four tensors per Clip;
* ``ConvGrad``'s and ``BatchNormalizationGrad``'s weight and bias gradients (com.microsoft; their schemas infer
  only the input gradient): ResNet-18's up to 9 MiB each.

Under ORT's defaults such allocations are what holds the pattern block twice (passes/arena_scratch.py explains
the arena's mechanics): the block fills an arena region of its own, a dynamic allocation too large for the free
chunks left elsewhere opens a second region, and the next step's block goes there. MobileNetV2 ``auto --exact``
(b32, 64×64): the head's ReLU6-gradient mask cast to float ([32, 1280, 2, 2], 640 KiB) was that allocation;
ORT-defaults growth 208.1 → 116.3 MiB with the shapes declared (NOTES-cnndefaults.md).

The pass declares every output of ORT's own kernels (ONNX and com.microsoft domains) that declares no shape at
all, with the static shape the analysis inferred (no data-dependent size); values ORT infers anyway get the shape
ORT gives them (GPT-tiny ``lossless``: written graph's losses as main's, 91 values declared). It adds nothing to
the computation. Left alone: a declared shape, even a symbolic one (ORT reads it as declared), custom-op outputs
(a PyOp's output shape is what the op returns at run time), data-sized payloads, graph outputs.
"""
from __future__ import annotations

import math

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .records import PassRecord

# Domains whose kernels ORT runs itself (their output shapes follow from the op, as the analysis infers them).
_ORT_DOMAINS = ("", "ai.onnx", "com.microsoft")


def undeclared_static(model: ir.Model) -> list[tuple[ir.Value, tuple[int, ...], ir.DataType]]:
    """(value, shape, element type) for every output of an ORT-domain node that declares no shape while the
    analysis inferred a static one (no data-dependent size), graph outputs excepted."""
    from ..analysis.cached import analysis_of

    analysis = analysis_of(model)
    outputs = set(model.graph.outputs)
    found = []
    for node in model.graph:
        if node.domain not in _ORT_DOMAINS:
            continue
        for value in node.outputs:
            if not value.name or value in outputs or value.shape is not None:
                continue
            info = analysis.tensors.get(value.name)
            if info is None or info.type.shape is None or info.size_hint is not None or info.type.dtype is None:
                continue
            dtype = value.dtype if value.dtype is not None else ir.DataType.from_numpy(info.type.dtype)
            found.append((value, tuple(int(d) for d in info.type.shape), dtype))
    return found


class DeclareShapesPass(OnnxcompPass):
    """Declares the static shapes of outputs ORT would otherwise allocate outside its memory pattern (see the
    module docstring). One record listing the values it declared."""

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
        nbytes = sum(int(dtype.itemsize) * math.prod(shape) for _, shape, dtype in found)
        outcome.records.append(PassRecord("moved", self.name, "value shapes", {
            "pass": self.name, "declared": len(found), "bytes": nbytes,
            "values": [v.name for v, _, _ in found],
            "why": "static shapes ORT's inference leaves unresolved: without them ORT allocates these tensors "
                   "outside its memory pattern, during the step"}))
        outcome.modified = True
        return outcome

