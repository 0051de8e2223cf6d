"""Predict ORT's memory-pattern block P (ORT defaults: arena, mem pattern, mem reuse, DEFAULT order) of a graph.

Model: ORT's buffer-reuse plan replayed on the planner's buffers (`planner/ort_reuse.py`: a chain of tensors
sharing one buffer is one allocation from its first tensor's birth to its last one's death), then ORT's
MemPatternPlanner: in run order, each allocation takes the best-fitting gap between the blocks still live (or the
stretch above the highest one, if it wastes less; else the end), each block leaves after its last reader. Also
printed: the DEFAULT-order live peak, the replayed reuse peak, P as an inference build would plan it (a reuse chain
one occupied block from its first birth to its last death, ``pattern_chains_whole``) and P with ORT's reuse off
(every tensor its own allocation). ``pattern`` uses program counters, as ORT's training build does (see
``pattern_bytes``): against P read from ORT's log on the architecture suite's 12 graphs (6 baselines, 6 ``auto
--exact``; NOTES-suitedef2.md) it is off by -4.1 to +3.7 MiB (mean |error| 1.6), the chains-whole variant by 0 to
+17.9 (mean 4.0). Still rough: the replay models no ORT fusion (a Conv and its lone Relu/Add reader run as one
FusedConv, so the Conv's output never exists) and no in-place reuse.

    python tools/pattern_block.py MODEL.onnx [MODEL.onnx ...]

A rough model (NOTES-vit4x.md): against P read from ORT's log (`ORT_LOG=1 python tools/arena_strategy_check.py
DIR MODEL 1 -1`, the arena's first large extension) on 20 ViT-tiny graphs it was off by -3.2 to +1.5 MiB (e.g.
13.99 measured / 14.89 predicted; 15.60 / 14.15; 20.79 / 21.54; ORT reuse off 11.00 / 10.88): in-place reuse
(MayInplace kernels) and ORT's own allocation order within a node are not modelled. Good enough to tell 11 from
21 MiB, not to choose between plans 1 MiB apart.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from onnxcomp.planner.ort_reuse import ALIGN, pattern_bytes  # noqa: F401 (the model lives in the planner)


def report(path: Path) -> dict[str, int]:
    import onnx

    from onnxcomp.analysis import analyze_model
    from onnxcomp.analysis.execution_order import in_run_order
    from onnxcomp.planner.buffers import live_bytes
    from onnxcomp.planner.ort_reuse import ort_signatures, planned_live, reuse_plan

    model = in_run_order(onnx.load(str(path), load_external_data=False), "default")
    analysis = analyze_model(model)
    buffers = analysis.buffers()
    n = len(model.graph.node)
    plan = reuse_plan(buffers, n, ort_signatures(analysis))
    alone = reuse_plan(buffers, n, {b.name: None for b in buffers})
    return {"live_peak": int(live_bytes(buffers, n).max()), "reuse_peak": int(planned_live(plan, n).max()),
            "pattern": pattern_bytes(plan), "pattern_chains_whole": pattern_bytes(plan, counters=False),
            "pattern_without_reuse": pattern_bytes(alone)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", type=Path, nargs="+")
    args = ap.parse_args()
    for path in args.models:
        if not path.is_file():
            raise SystemExit(f"{path}: no such model file; pass a training graph (.onnx)")
        r = report(path)
        print(f"{path}: " + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
