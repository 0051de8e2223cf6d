"""The heap term of the predicted step peak: pages of glibc's heap a training step touches beyond its live data.

`onnxcomp measure` reads every baseline after ``malloc_trim(0)`` (runtime/proc_memory.measure_call), so a step's
peak counts every heap page it touches, not only the bytes live at once. The live data matches the planner's
prediction (planner/predict.py: malloc log 10.20 vs 10.19 MiB on ResNet-18's 12 MiB plan), but the step's small
blocks (tensors under the mmap threshold, ORT's per-node allocations, the PyOp bridge's NumPy copies) are spread
by best fit over the free space that ORT's first run leaves between its live blocks, and the step faults those
pages back in: 0.3-0.8 KiB per node on ResNet-18's chunked plans, 1.6 KiB per node on a PyOp-heavy small net
(docs/notes/peakjump.md §4). The live-curve prediction has no such term, so the planner accepted plans that
measured 13.7-30.7 MiB against 12 and 15 MiB budgets.

``heap_term(features)`` is a linear model in what the graph has (``HeapFeatures``), fitted on measured step peaks
of several graphs (ResNet-18 plans at several budgets, the suite's baselines and plans, chunked and unchunked):
tools/heap_term_fit.py fits it and writes docs/auto/heapterm/fit.json (its data, coefficients, error). The
coefficients below are that fit's; the test in tests/test_heap_term.py checks they are the file's.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import onnx

# glibc's mmap threshold as `measure` pins it (runtime/measure.py, MALLOC_ENV): smaller blocks come from the heap.
MMAP_THRESHOLD = 128 << 10
PYOP_DOMAIN = "ai.onnx.contrib"     # onnxruntime-extensions PyOps (onnxcomp's codecs)


@dataclass(frozen=True)
class HeapFeatures:
    """What a graph has that drives its step's small-block heap traffic."""
    nodes: int              # every node allocates ORT per-node bookkeeping on the heap (OpKernelContext, shapes)
    pyops: int              # PyOp bridge: per call, NumPy copies of every input and output, Python objects
    small_buffers: int      # transient tensors under the mmap threshold: heap blocks, one per producer per step
    small_bytes: int        # their bytes
    pyop_bytes: int         # bytes into and out of PyOps (the bridge copies them; under the threshold: heap)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


# Fitted coefficients (bytes per unit of each feature; tools/heap_term_fit.py, docs/auto/heapterm/fit.json). A
# feature not listed was tried and left out (docs/auto/heapterm/README.md says which and why).
COEFFICIENTS: dict[str, float] = {"nodes": 536.7302, "pyops": 30318.9974}
FEATURES = ("nodes", "pyops", "small_buffers", "small_bytes", "pyop_bytes")


def heap_features(model: onnx.ModelProto, analysis: Any = None) -> HeapFeatures:
    """``HeapFeatures`` of ``model`` (``analysis``: its GraphAnalysis, computed when not given)."""
    if analysis is None:
        from . import memo

        analysis = memo.analysis(model)
    nodes = list(model.graph.node)
    pyops = [n for n in nodes if n.domain == PYOP_DOMAIN]
    small = [b.size for b in analysis.buffers() if 0 < b.size < MMAP_THRESHOLD]
    pyop_bytes = 0
    for n in pyops:
        for name in [*n.input, *n.output]:
            t = analysis.tensors.get(name) if name else None
            pyop_bytes += int(getattr(t, "nbytes", 0) or 0) if t is not None else 0
    return HeapFeatures(len(nodes), len(pyops), len(small), int(sum(small)), pyop_bytes)


def heap_term(features: HeapFeatures, coefficients: dict[str, float] | None = None) -> int:
    """Predicted heap pages (bytes) a step touches above its live data: the fitted linear model."""
    c = COEFFICIENTS if coefficients is None else coefficients
    return max(0, int(c.get("const", 0.0) + sum(c.get(f, 0.0) * getattr(features, f) for f in FEATURES)))


def graph_heap_term(model: Any) -> int:
    """``heap_term`` of a ModelProto or an onnx-ir Model (its own analysis)."""
    if not isinstance(model, onnx.ModelProto):
        import onnx_ir as ir

        model = ir.serde.serialize_model(model)
    return heap_term(heap_features(model))
