"""Pass: make ORT's DEFAULT execution order run a rewritten graph the way its node list says.

Every onnxcomp pass places nodes by node-list position, which is what PRIORITY_BASED follows. ORT's DEFAULT
order (what users get unless they change it) ignores positions: it is a reverse depth-first walk from the
graph's leaves (nodes no other node reads), the highest-indexed leaf first (analysis/execution_order.py).
Two things rewrites leave behind make that walk hold activations to the end of the step:

* **Dead nodes.** A recompute pass that rewires a reader to its clone leaves the original view behind
  (GPT-tiny ``lossless``: 13 ``Reshape(A)`` of the weight-gradient Gemms, A = a GELU or LayerNorm output).
  Read by nothing, each is a leaf; DEFAULT walks it after the whole backward pass, so A (8 MiB each at
  batch 16, T 256) lives to the end. PRIORITY runs it early and frees A: the node list alone never shows it.
* **A stale accumulation chain.** ``EagerAccumulationPass`` chains the accumulators' flags in their
  production order so DEFAULT accumulates each weight gradient as soon as it exists. A later pass that
  moves weight-gradient branches (``EarlyWeightGradientPass``) changes that order; the chain still walks the
  old one, which pulls all of backward before the moved branches.

The pass removes dead, side-effect-free nodes (ONNX-domain ops that draw no random numbers: dropping a
Dropout would shift every later mask) and rebuilds the accumulation chain for the final order. Values and
arithmetic are untouched: losses and parameters stay bit-identical. It runs last in every transform.
"""
from __future__ import annotations

import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .eager_accumulation import ACCUMULATORS, CHAIN_PREFIX, EagerAccumulationPass
from .records import PassRecord

# ONNX ops whose result depends on a random stream: removing one changes what the others draw.
_RANDOM_OPS = {"Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
               "Bernoulli", "Multinomial"}


def removable(node: ir.Node) -> bool:
    """A node whose only effect is its outputs: ONNX domain, no random stream, not the order chain."""
    return node.domain in ("", "ai.onnx") and node.op_type not in _RANDOM_OPS and \
        not (node.name or "").startswith(CHAIN_PREFIX)


def dead_nodes(graph: ir.Graph) -> list[ir.Node]:
    """Removable nodes none of whose outputs is read or a graph output, transitively (a node read only by
    dead nodes is dead too), in node order."""
    outputs = set(graph.outputs)
    dead: set[ir.Node] = set()
    for node in reversed(list(graph)):
        if not removable(node):
            continue
        if all(v not in outputs and all(u.node in dead for u in v.uses()) for v in node.outputs):
            dead.add(node)
    return [n for n in graph if n in dead]


class DefaultOrderPass(OnnxcompPass):
    name = "default_order"
    full_check = False   # removes unread nodes and rebuilds a bool And chain: wiring and gates are checked

    def call(self, model: ir.Model) -> PassOutcome:
        graph = model.graph
        outcome = PassOutcome(model, False)
        dead = dead_nodes(graph)
        if dead:
            for node in dead:
                name = node.name or node.outputs[0].name
                outcome.records.append(PassRecord("moved", self.name, name, {
                    "node": name, "op": node.op_type, "pass": self.name, "removed": "read by nothing"}))
            graph.remove(dead, safe=True)
            outcome.modified = True
        if any(n.op_type in ACCUMULATORS for n in graph):
            rechained = EagerAccumulationPass().call(model)
            outcome.modified = outcome.modified or rechained.modified
        return outcome
