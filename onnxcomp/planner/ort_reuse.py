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


# ORT's memory-pattern model (tools/pattern_block.py prints it for a graph; its docstring gives its accuracy).
ALIGN = 64   # ORT rounds every planned allocation up to kAllocAlignment


def _overlap(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> bool:
    """ORT's ``OverlappingTimeSchedules``: do two sorted lists of [start, end] steps (ends inclusive) meet?"""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][0] <= b[j][0]:
            if a[i][1] >= b[j][0]:
                return True
            i += 1
        else:
            if b[j][1] >= a[i][0]:
                return True
            j += 1
    return False


def pattern_bytes(plan: Sequence[Physical], align: int = ALIGN, counters: bool = True) -> int:
    """Size of the block ORT's MemPatternPlanner gives ``plan``'s allocations (see module docstring).

    ``counters`` (ORT's training build: ``GeneratePatternGroupCache`` builds its planner with program counters):
    a block still held by a reuse chain whose tensors' [birth, death] intervals all miss the new allocation's
    intervals does not count as occupied, so the chain's dead stretches take other tensors. Without it, a chain
    is one occupied block from its first tensor's birth to its last one's death (the inference build)."""
    born: dict[int, list[int]] = defaultdict(list)
    dies: dict[int, list[int]] = defaultdict(list)
    spans: list[list[tuple[int, int]]] = []
    for i, p in enumerate(plan):
        spans.append(sorted((b.start, b.end) for b in p.values) or [(p.start, p.end)])
        if p.size > 0:
            born[p.start].append(i)
            dies[p.end].append(i)
    blocks: list[tuple[int, int, int]] = []   # (offset, size, allocation), by offset
    total = 0
    for step in sorted(set(born) | set(dies)):
        for i in born.get(step, []):
            size = -(-plan[i].size // align) * align
            current, waste, best = 0, None, None
            for off, sz, j in blocks:
                if counters and not _overlap(spans[i], spans[j]):
                    continue      # held, but by tensors that are dead whenever this one lives
                if off >= current:
                    gap = off - current
                    if gap >= size and (waste is None or gap - size < waste):
                        waste, best = gap - size, current
                current = max(current, off + sz)
            if current < total and total - current >= size and (waste is None or total - current - size < waste):
                best = current      # the stretch between the highest occupied block and the block's end
            if best is None:      # no gap fits: after the highest occupied block
                best = current
            total = max(total, best + size)
            at = next((k for k, (off, sz, _) in enumerate(blocks) if off > best or (off == best and sz >= size)),
                      len(blocks))
            blocks.insert(at, (best, size, i))
        gone = set(dies.get(step, []))
        if gone:
            blocks = [b for b in blocks if b[2] not in gone]
    return total
