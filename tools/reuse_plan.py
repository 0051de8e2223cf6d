"""What ORT's buffer-reuse plan (session option mem reuse, on by default) costs a training graph, predicted.

ORT's allocation planner gives a new tensor the most recently freed buffer of exactly its byte size
(`FindReusableTensor`: an exact-size freelist, newest first). The buffer then stays allocated from its first
tensor's death to the reusing tensor's birth, however far apart: a forward transient matched by a tensor of
the same size born in backward (a recompute clone, a gradient) is held across the forward/backward peak.
This replays that plan on the planner's buffers in ORT's run order and reports the peak without and with
reuse, and the buffers held dead at the reuse peak (their tensors: the chain of values that shared them).

    python tools/reuse_plan.py DIR/lossless.onnx [--order default|priority] [--top 15]

A prediction (in-place reuse and the memory pattern's own layout are not modelled); measured figures come
from `onnxcomp measure --mem-reuse` (docs: NOTES-seqlen.md, "Why ORT defaults stay near 2×").
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onnxcomp.planner.buffers import Buffer, live_bytes


@dataclass
class Physical:
    """One allocation of the reuse plan: ``size`` bytes from ``start`` to ``end``, shared by ``values`` in turn."""
    size: int
    start: int
    end: int
    values: list[Buffer] = field(default_factory=list)

    def dead_at(self, step: int) -> bool:
        """Held at ``step`` with none of its tensors alive there."""
        return self.start <= step <= self.end and not any(b.start <= step <= b.end for b in self.values)


def reuse_plan(buffers: Sequence[Buffer], n_steps: int) -> list[Physical]:
    """The physical buffers ORT's planner makes of ``buffers`` (exact-size freelist, most recently freed
    first; zero-sized buffers never shared)."""
    born: dict[int, list[Buffer]] = defaultdict(list)
    for b in buffers:
        born[b.start].append(b)
    plan: list[Physical] = []
    freelist: list[Physical] = []       # front: freed last
    ends: dict[int, list[Physical]] = defaultdict(list)
    for step in range(n_steps):
        for b in born[step]:
            p = next((f for f in freelist if f.size == b.size), None) if b.size > 0 else None
            if p is None:
                p = Physical(b.size, step, b.end)
                plan.append(p)
            else:
                freelist.remove(p)
                p.end = max(p.end, b.end)
            p.values.append(b)
            ends[b.end].append(p)
        for p in ends.pop(step, []):
            if p.end == step:
                freelist.insert(0, p)
    return plan


def report(model_path: Path, order: str, top: int) -> dict:
    import onnx

    from onnxcomp.analysis import analyze_model
    from onnxcomp.analysis.execution_order import in_run_order

    model = in_run_order(onnx.load(str(model_path), load_external_data=False), order)
    n = len(model.graph.node)
    buffers = analyze_model(model).buffers()
    plan = reuse_plan(buffers, n)
    dynamic = live_bytes(buffers, n)
    reused = live_bytes([Buffer(f"p{i}", p.size, p.start, p.end) for i, p in enumerate(plan)], n)
    at = int(np.argmax(reused))
    held = sorted((p for p in plan if p.dead_at(at)), key=lambda p: -p.size)
    return {"dynamic_peak": int(dynamic.max()), "dynamic_at": model.graph.node[int(np.argmax(dynamic))].name,
            "reuse_peak": int(reused.max()), "reuse_at": model.graph.node[at].name,
            "held_dead_bytes": sum(p.size for p in held),
            "held": [{"bytes": p.size, "span": [p.start, p.end], "values": [b.name for b in p.values]}
                     for p in held[:top]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--order", default="default", choices=["default", "priority"])
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    if not args.model.is_file():
        raise SystemExit(f"{args.model}: no such model file; pass a training graph (.onnx)")
    r = report(args.model, args.order, args.top)
    mib = 2**20
    print(f"peak without reuse {r['dynamic_peak'] / mib:.1f} MiB ({r['dynamic_at']}); with ORT's reuse plan "
          f"{r['reuse_peak'] / mib:.1f} MiB ({r['reuse_at']}), of which {r['held_dead_bytes'] / mib:.1f} MiB "
          "held by buffers whose tensors are all dead there:")
    for h in r["held"]:
        names = ", ".join(h["values"][:3]) + (" ..." if len(h["values"]) > 3 else "")
        print(f"  {h['bytes'] / mib:7.2f} MiB  steps {h['span'][0]}..{h['span'][1]}  {names}")


if __name__ == "__main__":
    main()
