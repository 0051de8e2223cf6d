"""Pass: ReluGrad on a decoded sign mask as a product, ``Mul(dY, Cast(mask, float))`` (lossy policies).

Where the sign bits hold ReLU's input (passes/signbits.py), ReluGrad reads ``Cast(mask, float)``: 1.0 where
X > 0, else 0.0. ORT 1.19's CPU ReluGrad kernel selects per element with a branch on X > 0, so on real masks
(signs close to random) it runs at the speed of branch mispredictions: 7 ns per element, one thread
(ResNet-18 batch 32, 64×64: 15 ms for the 8 MiB stem map, twice that in the chunked stem backward's two
passes, against ~1 ms for a ``Mul`` of the same size; docs/notes/steptime.md). With X ∈ {0, 1},
``dY · X`` gives the same values: ``dY · 1 = dY`` for every dY, ``dY · 0 = ±0``. What differs:

* the *sign* of a masked zero (``dY · 0`` is −0 for negative dY; ReluGrad gives +0). A zero's sign changes
  no sum, product or parameter update that is not itself zero (the same argument as passes/masked_fill.py);
* a NaN or ±inf gradient at a masked position gives NaN where ReluGrad gives +0 (a step with a non-finite
  gradient is lost either way).

So the losses and parameters stay those of ReluGrad in practice, but the gradient tensor is not bit for bit
the same: the pass is only in the lossy policies (passes/__init__.py), never in an exact one. It runs last,
after the chunked backward regions were built (their finder looks for ReluGrad). Only ReluGrads whose X is
a ``Cast`` to float of a boolean tensor are rewritten (0/1 by construction); any other ReluGrad (a float
stash, a recomputed ReLU input) is left alone.
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped
from .records import PassRecord

PATTERN = "ReluGrad(dY, Cast(bool mask))"
_MS = "com.microsoft"


def _mask_input(node: ir.Node) -> ir.Value | str:
    """The 0/1 float mask ReluGrad ``node`` reads, or why it reads something else."""
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return "not a two-input ReluGrad"
    x = node.inputs[1]
    cast = x.producer()
    if cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx"):
        return "X is not a Cast (a float stash or a recomputed input: its values are not 0/1)"
    source = cast.inputs[0]
    to = cast.attributes.get("to")
    if source is None or source.dtype != ir.DataType.BOOL or to is None or to.as_int() != ir.DataType.FLOAT:
        return "X is not a boolean cast to float32"
    if node.outputs[0].dtype not in (None, ir.DataType.FLOAT) or node.inputs[0].dtype not in (None, ir.DataType.FLOAT):
        return "not float32"
    return x


class MaskGradPass(OnnxcompPass):
    """Every ``ReluGrad(dY, Cast(bool, float))`` becomes ``Mul(dY, Cast(bool, float))`` (see the module
    docstring: same values, a masked zero's sign may differ; lossy policies only)."""

    name = "mask_grad"
    full_check = False

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        for node in list(model.graph):
            if node.op_type != "ReluGrad" or node.domain != _MS:
                continue
            found = _mask_input(node)
            if isinstance(found, str):
                outcome.skipped.append(Skipped(node.name or node.outputs[0].name, PATTERN, found))
                continue
            # The node keeps its place, inputs and output value (and so every reader and the planner's
            # view of its buffers); only the kernel changes.
            node.op_type, node.domain = "Mul", ""
            outcome.records.append(PassRecord("moved", self.name, node.name or node.outputs[0].name, {
                "node": node.name, "op": "ReluGrad", "as": "Mul(dY, mask)", "pass": self.name,
                "pattern": PATTERN, "mask": found.name, "exact": False,
                "note": "same values; a masked zero's sign may differ (and a non-finite dY there gives NaN): "
                        "ORT's ReluGrad branches per element"}))
            outcome.modified = True
        return outcome
