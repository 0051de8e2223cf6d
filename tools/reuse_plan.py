"""What ORT's buffer-reuse plan (session option mem reuse, on by default) costs a training graph, predicted.

ORT's allocation planner gives a new tensor the most recently freed buffer of the same element size and
the same shape (`FindReusableTensor`/`SameSize` in onnxruntime 1.19's allocation_planner.cc: a freelist,
newest first; a buffer's shape is its first tensor's; unknown shapes never match). The buffer then stays allocated from its first
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
from pathlib import Path

import numpy as np

from onnxcomp.planner.buffers import live_bytes
from onnxcomp.planner.ort_reuse import Physical, ort_signatures, planned_live, reuse_plan  # noqa: F401 (re-export)


def report(model_path: Path, order: str, top: int) -> dict:
    import onnx

    from onnxcomp.analysis import analyze_model
    from onnxcomp.analysis.execution_order import in_run_order

    model = in_run_order(onnx.load(str(model_path), load_external_data=False), order)
    n = len(model.graph.node)
    analysis = analyze_model(model)
    buffers = analysis.buffers()
    plan = reuse_plan(buffers, n, ort_signatures(analysis))
    dynamic = live_bytes(buffers, n)
    reused = planned_live(plan, n)
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
