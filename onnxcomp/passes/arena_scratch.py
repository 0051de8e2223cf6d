"""Pass: keep ORT kernels' scratch inside the memory pattern, so ORT's arena holds the pattern block once.

Under ORT's default session settings (CPU arena, memory pattern, buffer reuse) every training step takes one
block of the pattern's size P from the BFC arena. The arena grows by powers of two and splits a chunk only when
the rest is at least the request or at least 128 MiB, so for P up to ~384 MiB the block fills a region of its
own. Any allocation made *outside* the pattern during the step then finds no free chunk, and the arena opens a
second region of the same size; the next step's block goes to the lower of the two equal regions, and from then
on both are resident: about 2P (docs/notes/ortdefaults.md, cause 3). GPT-tiny (b16, T256, ORT defaults):
``lossless`` made one 8 MiB BiasGelu scratch request per MLP block; ``dpr-fp8`` grew 225.7 MiB before, 114.3 MiB
with this pass, static DPR payloads and passes/reuse_signature.py, same losses (NOTES-reuse.md). Any other
allocation outside the pattern still does it: ``lossless`` keeps one 2 MiB request from inside ORT (kernel not
identified) and stays near 2P.

Two kinds of allocation leave the pattern, and a rewrite makes both:

* **Kernel scratch.** ORT fuses ``Gelu(Add(X, bias))`` into ``BiasGelu`` when the Add's output has no other
  reader (``BiasGeluFusion``: one Add input of rank 1, the other's last dimension equal to it), and
  ``BiasGelu``'s CPU kernel takes a scratch buffer of X's size from the arena. An untouched training graph
  keeps the Add's output for ``GeluGrad`` (two readers: no fusion); once a recompute pass rebuilds it for the
  backward, the forward Add has only the Gelu, and the fusion happens. This pass views the rank-1 bias as
  ``[1, n]`` (an ``Unsqueeze``, zero-copy): the fusion no longer applies, ORT runs the Add and its ``Gelu``
  kernel, which uses its output as scratch. Same arithmetic, element by element (``BiasGelu`` computes
  ``(x + b) * 0.5 * (erf((x + b) / sqrt 2) + 1)`` as ``Gelu(Add)`` does): losses stay bit-identical.
* **Outputs of unknown shape** (a custom op's payload declared with a symbolic length) are allocated
  dynamically: that is the encoders' business (they declare what they know, passes/dpr.py).
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .editor import IrGraphEditor
from .records import PassRecord

# ORT fusions whose fused CPU kernel takes a scratch buffer of the input's size (onnxruntime 1.19:
# contrib_ops/cpu/bert/bias_gelu.cc, BiasGelu and FastGelu-with-bias share the kernel).
_GELUS = {("com.microsoft", "Gelu"), ("com.microsoft", "FastGelu")}


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def fusable_bias_adds(graph: ir.Graph) -> list[tuple[ir.Node, int]]:
    """(Add, index of its rank-1 input) for every Add that ORT would fuse with the Gelu reading it: an ONNX
    Add whose only reader is a com.microsoft Gelu/FastGelu, not a graph output, one input of rank 1."""
    outputs = set(graph.outputs)
    found = []
    for node in graph:
        if node.op_type != "Add" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        out = node.outputs[0]
        uses = list(out.uses())
        if out in outputs or len(uses) != 1 or (uses[0].node.domain, uses[0].node.op_type) not in _GELUS:
            continue
        ranks = [_rank(v) if v is not None else None for v in node.inputs]
        if ranks.count(1) != 1 or None in ranks or not isinstance(node.inputs[ranks.index(1)].shape[0], int):
            continue
        found.append((node, ranks.index(1)))
    return found


class ArenaScratchPass(OnnxcompPass):
    """Views the bias of every ``Gelu(Add(X, bias))`` ORT would fuse into ``BiasGelu`` as ``[1, n]``, so the
    step allocates nothing outside ORT's memory pattern for it (see the module docstring)."""

    name = "arena_scratch"
    full_check = False   # adds Unsqueeze views of rank-1 inputs: wiring is what can go wrong

    def call(self, model: ir.Model) -> PassOutcome:
        graph = model.graph
        outcome = PassOutcome(model, False)
        sites = fusable_bias_adds(graph)
        if not sites:
            return outcome
        editor = IrGraphEditor(graph)
        axes = editor.shared_const("onnxcomp_axes_0", [0])
        views: dict[ir.Value, ir.Value] = {}   # a bias read by several Adds gets one view
        for add, k in sites:
            bias = add.inputs[k]
            if bias not in views:
                n = bias.shape[0]
                start = len(editor.nodes)
                views[bias] = editor.op("Unsqueeze", [bias, axes], f"{bias.name}_row", bias.dtype, [1, n])
                graph.insert_before(add, editor.nodes[start:])
            add.replace_input_with(k, views[bias])
            name = add.name or add.outputs[0].name
            outcome.records.append(PassRecord("moved", self.name, name, {
                "node": name, "op": add.op_type, "pass": self.name,
                "kept_unfused": f"{bias.name} viewed as [1, n]: no BiasGelu, whose kernel takes scratch "
                                "outside ORT's memory pattern"}))
        outcome.modified = True
        return outcome
