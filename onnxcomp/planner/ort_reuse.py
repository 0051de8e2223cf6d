"""ORT's buffer-reuse plan (session option mem reuse, on by default), replayed on the planner's buffers.

ORT's allocation planner gives a new tensor the most recently freed buffer of the same element size and the
same shape (onnxruntime 1.19, allocation_planner.cc: ``FindReusableTensor``/``SameSize``: a freelist, newest
first; a shared buffer keeps its first tensor's shape; unknown shapes never match). The buffer then stays
allocated from its first tensor's birth to its last tensor's death, however far apart: a forward transient
taken by a tensor of the same shape born in backward is held across the forward/backward peak. With ORT's
memory pattern on, the pattern block is sized by that plan: the replay's peak predicted GPT-tiny ``lossless``'s
block at 97.8 MiB, ORT allocated 97.75 MiB (NOTES-reuse.md).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .buffers import Buffer, live_bytes

Signature = Hashable


@dataclass
class Physical:
    """One allocation of the reuse plan: ``size`` bytes from ``start`` to ``end``, shared by ``values`` in turn."""
    size: int
    start: int
    end: int
    key: Signature | None = None
    values: list[Buffer] = field(default_factory=list)

    def dead_at(self, step: int) -> bool:
        """Held at ``step`` with none of its tensors alive there."""
        return self.start <= step <= self.end and not any(b.start <= step <= b.end for b in self.values)


def reuse_plan(buffers: Sequence[Buffer], n_steps: int,
               signature: Mapping[str, Signature | None] | None = None) -> list[Physical]:
    """The physical buffers ORT's planner makes of ``buffers`` (freelist, most recently freed first;
    zero-sized buffers never shared). A buffer takes a freed one of the same ``signature`` (by buffer name;
    ORT's is (element size, shape), None: never shared; default: the byte size)."""
    born: dict[int, list[Buffer]] = defaultdict(list)
    for b in buffers:
        born[b.start].append(b)
    plan: list[Physical] = []
    free: dict[Signature, list[Physical]] = defaultdict(list)    # per signature, newest freed last
    ends: dict[int, list[Physical]] = defaultdict(list)
    for step in range(n_steps):
        for b in born[step]:
            key = signature.get(b.name) if signature is not None else b.size
            stack = free.get(key) if b.size > 0 and key is not None else None
            if stack:
                p = stack.pop()
                p.end = max(p.end, b.end)
            else:
                p = Physical(b.size, step, b.end, key)
                plan.append(p)
            p.values.append(b)
            ends[b.end].append(p)
        for p in ends.pop(step, []):
            if p.end == step and p.key is not None and p.size > 0:
                free[p.key].append(p)
    return plan


def planned_live(plan: Sequence[Physical], n_steps: int) -> np.ndarray:
    """Bytes the reuse plan holds at each step."""
    return live_bytes([Buffer(f"p{i}", p.size, p.start, p.end) for i, p in enumerate(plan)], n_steps)


def ort_signatures(analysis) -> dict[str, tuple[int, tuple[int, ...]] | None]:  # noqa: ANN001 (GraphAnalysis)
    """Each tensor's key in ORT's reuse rule: (element size, static shape); None where ORT never shares it: a
    graph output (allocated for the caller), no static shape, a payload whose size only the planner's hint knows."""
    outputs = {o.name for o in analysis.model.graph.output}
    out: dict[str, tuple[int, tuple[int, ...]] | None] = {}
    for name, t in analysis.tensors.items():
        shape = t.type.shape
        out[name] = None if shape is None or t.size_hint is not None or name in outputs else \
            (t.type.dtype.itemsize, tuple(shape))
    return out
