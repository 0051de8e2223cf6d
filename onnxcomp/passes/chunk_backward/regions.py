"""Region finding for chunk_backward: chains of batch-separable backward ops that end at a first-layer
ConvGrad with no input-gradient output (see the package docstring). Reads the cached analysis only."""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import helper

from ...analysis import GraphAnalysis
from ..base import Skipped, node_attr

MS_DOMAIN = "com.microsoft"
# Names of everything the pass adds start with this: a re-run recognises a rewritten region.
PREFIX = "onnxcomp_chunked"
TRIGGER_FLAT_SHAPE = "onnxcomp_trigger_flat_shape"
PATTERN = "batch-chunked backward region"
# Backward ops a region may hold: op type -> index of the per-sample input it reads besides the gradient.
SEPARABLE: dict[str, int | None] = {"ConvGrad": 1, "ReluGrad": 1, "LeakyReluGrad": 1, "MaxPoolGrad": 1,
                                    "AveragePoolGrad": None, "BatchNormalizationGrad": 1}
# Region lengths the planner tries per terminal (the full chain is always tried too).
_LENGTHS = (2, 3, 4, 6, 8, 12)


@dataclass
class Region:
    """A chain of backward ops (top first) that can run in batch chunks, and what the planner predicts.

    ``predicted_peak``: chunk count -> predicted training-step peak after the rewrite (bytes);
    ``predicted_peak_before``: the same without it. ``exact`` is always False (rounding, see module doc)."""
    name: str
    nodes: tuple[str, ...]
    grad_input: str
    batch: int
    op_types: tuple[str, ...] = ()
    batchnorm: str | None = None
    recomputed_input: str | None = None       # the BN input rebuilt from the image per chunk (stash dropped)
    exact: bool = False
    predicted_peak_before: int | None = None
    predicted_peak: dict[int, int] = field(default_factory=dict)

    @property
    def terminal(self) -> str:
        return self.nodes[-1]

    def reduction(self, chunks: int) -> int | None:
        """Predicted bytes off the step peak with ``chunks`` chunks (None: not predicted)."""
        if self.predicted_peak_before is None or chunks not in self.predicted_peak:
            return None
        return self.predicted_peak_before - self.predicted_peak[chunks]

    def to_dict(self) -> dict:
        return {"name": self.name, "nodes": list(self.nodes), "op_types": list(self.op_types), "grad_input": self.grad_input, "batch": self.batch,
                "batchnorm": self.batchnorm, "recomputed_input": self.recomputed_input, "exact": self.exact,
                "predicted_peak_before": self.predicted_peak_before,
                "predicted_peak": {str(k): v for k, v in self.predicted_peak.items()}}


def is_trigger(op_type: str, inputs: list[str]) -> bool:
    """A one-element timing read (zero_after's first node, by its op type and input names): it may move to
    another tensor of the same type."""
    return op_type == "Reshape" and len(inputs) == 2 and inputs[1] == TRIGGER_FLAT_SHAPE


def region_name(nodes: list[onnx.NodeProto]) -> str:
    return f"{nodes[0].name}..{nodes[-1].name}" if len(nodes) > 1 else nodes[0].name


class _Finder:
    """Grows a region upwards from each first-layer ConvGrad while the ops stay batch-separable."""

    def __init__(self, analysis: GraphAnalysis) -> None:
        self.a = analysis
        self.nodes = analysis.nodes
        self.index = {id(n): i for i, n in enumerate(self.nodes)}

    def batch_of(self, name: str) -> int | None:
        t = self.a.tensors.get(name)
        return t.shape[0] if t is not None and t.shape is not None and len(t.shape) >= 1 else None

    def readers(self, name: str) -> list[onnx.NodeProto]:
        t = self.a.tensors.get(name)
        return [self.nodes[c] for c in t.consumers if not is_trigger(self.nodes[c].op_type, list(self.nodes[c].input))] if t else []

    def op_problem(self, node: onnx.NodeProto, batch: int) -> str | None:
        """Why ``node`` cannot be in a region (None: it can)."""
        if node.op_type not in SEPARABLE or node.name.startswith(PREFIX):
            return f"{node.op_type} is not batch-separable (or not a gradient op a region can hold)"
        if node.op_type in ("ConvGrad", "ReluGrad", "LeakyReluGrad", "BatchNormalizationGrad") and \
                node.domain != MS_DOMAIN:
            return f"{node.op_type} in domain {node.domain!r}"
        names = [node.input[0]] + ([node.input[SEPARABLE[node.op_type]]] if SEPARABLE[node.op_type] else [])
        names += [node.output[0]] if node.output and node.output[0] else []
        for n in names:
            t = self.a.tensors.get(n)
            if t is None or t.shape is None or len(t.shape) != 4 or t.shape[0] != batch:
                return f"{n} has no static NCHW shape with batch {batch}"
        if node.op_type == "MaxPoolGrad" and node_attr(node, "storage_order", 0):
            return "MaxPoolGrad with storage_order=1"
        return None

    def terminals(self) -> list[onnx.NodeProto]:
        out = []
        for i, n in enumerate(self.nodes):
            if n.op_type == "ConvGrad" and n.domain == MS_DOMAIN and not n.name.startswith(PREFIX) and \
                    self.a.boundary.is_backward(i) and not (n.output and n.output[0]) and len(n.output) > 1 \
                    and n.output[1]:
                out.append(n)
        return out

    def chain(self, terminal: onnx.NodeProto) -> tuple[list[onnx.NodeProto], str]:
        """The longest region ending at ``terminal`` (top first) and why it stops growing."""
        batch = self.batch_of(terminal.input[0])
        if batch is None or batch < 2:
            return [], f"its output gradient has no static batch >= 2 (batch {batch})"
        problem = self.op_problem(terminal, batch)
        if problem:
            return [], problem
        chain = [terminal]
        bns = 0
        while True:
            top = chain[0]
            g = top.input[0]
            t = self.a.tensors.get(g)
            if t is None or t.producer is None:
                return chain, f"{g} is a graph input"
            p = self.nodes[t.producer]
            if not self.a.boundary.is_backward(t.producer):
                return chain, f"{g} comes from the forward pass"
            if p.output[0] != g:
                return chain, f"{g} is not {p.name}'s input gradient"
            others = [r for r in self.readers(g) if r is not top]
            if others:
                return chain, f"{g} is also read by {[r.name for r in others][:3]}"
            problem = self.op_problem(p, batch)
            if problem:
                return chain, f"above it: {problem}"
            if p.op_type == "BatchNormalizationGrad":
                if bns:
                    return chain, ("above it: a second BatchNormalizationGrad (two batch couplings would need a "
                                   "third pass)")
                bns += 1
            if p.op_type == "ConvGrad" and len(p.output) > 1 and p.output[1] and \
                    self.a.tensors.get(p.output[1]) is None:
                return chain, f"{p.name}'s weight gradient has no type"
            chain.insert(0, p)

    def recomputable(self, bn: onnx.NodeProto, conv: onnx.NodeProto) -> onnx.NodeProto | None:
        """The forward Conv producing the BN input from the image with the terminal ConvGrad's weight:
        rerunning it on a batch chunk gives that chunk's BN input exactly, so the BN input needs no stash. Seen
        through a native fp16 decode (Cast ← gated Reshape ← Cast ← Clip ← the Conv output)."""
        name, fwd = bn.input[1], None
        for _ in range(6):
            x = self.a.tensors[name]
            if x.producer is None:
                return None
            fwd = self.nodes[x.producer]
            if fwd.op_type not in ("Cast", "Reshape", "Clip", "Identity"):
                break
            name = fwd.input[0]
        if fwd is None or self.a.tensors[fwd.output[0]].shape != self.a.tensors[bn.input[1]].shape:
            return None
        image = self.a.tensors.get(fwd.input[0]) if fwd.input else None
        if fwd.op_type != "Conv" or fwd.domain not in ("", "ai.onnx") or image is None or image.producer is not None:
            return None
        if fwd.input[0] != conv.input[1] or fwd.input[1] != conv.input[2]:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in fwd.attribute}
        return fwd if attrs == {a.name: helper.get_attribute_value(a) for a in conv.attribute} else None


def _raw_stashes(analysis: GraphAnalysis, ops: list[onnx.NodeProto], recomputed: str | None) -> list[str]:
    """Stashes the region would slice as the forward pass left them (not a graph input, not decoded or
    recomputed in backward): an encoder running after this pass could not time a decoder for them."""
    out = []
    for i, node in enumerate(ops):
        k = SEPARABLE[node.op_type]
        if k is None or (node.op_type == "BatchNormalizationGrad" and recomputed is not None):
            continue
        name = node.input[k]
        if i == len(ops) - 1 and recomputed is not None:
            continue          # the image: read by the recomputing Conv as well
        t = analysis.tensors[name]
        if t.producer is not None and not analysis.boundary.is_backward(t.producer):
            out.append(name)
    return out


def find_regions(analysis: GraphAnalysis, max_ops: int | None = None, lengths: bool = True,
                 raw_stashes: bool = True) -> tuple[list[Region], list[Skipped]]:
    """Candidate regions (several lengths per terminal, longest last) and the terminals refused.
    raw_stashes False: only regions that slice no stash as the forward pass left it (see _raw_stashes)."""
    finder = _Finder(analysis)
    found: list[Region] = []
    skipped: list[Skipped] = []
    for term in finder.terminals():
        chain, why = finder.chain(term)
        if max_ops is not None:
            chain = chain[-max_ops:]
        if len(chain) < 2:
            skipped.append(Skipped(term.name, PATTERN, f"nothing to chunk: {why}" if why else "nothing to chunk"))
            continue
        sizes = sorted({n for n in _LENGTHS if n < len(chain)} | {len(chain)}) if lengths else [len(chain)]
        for m in sizes:
            ops = chain[-m:]
            if ops[0].op_type == "BatchNormalizationGrad" and m < len(chain) and \
                    chain[-m - 1].op_type == "ReluGrad":
                continue   # a BN region takes the ReluGrad above it along (it is free: sliced, not stashed)
            bn = next((n for n in ops if n.op_type == "BatchNormalizationGrad"), None)
            rec = None
            if bn is not None and ops[-2] is bn:
                fwd = finder.recomputable(bn, ops[-1])
                rec = fwd.output[0] if fwd is not None else None
            if not raw_stashes and _raw_stashes(analysis, ops, rec):
                continue
            found.append(Region(region_name(ops), tuple(n.name for n in ops), ops[0].input[0],
                                finder.batch_of(term.input[0]) or 0, tuple(n.op_type for n in ops),
                                bn.name if bn is not None else None, rec))
    return found, skipped


def prefix_of(region: Region) -> str:
    """The name prefix of everything the rewrite of ``region`` adds."""
    return f"{PREFIX}_{region.grad_input.replace('/', '_').strip('_')}"
