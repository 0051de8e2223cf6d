"""Where a transformed graph's extra minor page faults per training step come from (issue 14).

Under ``onnxcomp measure``'s pinned allocator (``MALLOC_MMAP_THRESHOLD_=131072``) with ORT's arena, mem pattern
and mem reuse off, every buffer of 128 KiB or more is a fresh mapping whose pages fault in once per step (about
one fault per 4 KiB page): the fault count is a load-independent measure of fresh memory, and its kernel time
is most of the lossy policies' extra step time there (docs/notes/steptime2.md). This tool splits a graph's
fresh bytes by source, against the baseline graph:

* **predicted** (from the graph, no run): every non-view node output >= the threshold, by who made it --
  the baseline's own nodes (by op type), onnxcomp's native inserted nodes (by the pass that named them),
  the PyOps' outputs (ORT allocates them; the bridge memcpy's the op's result into them) -- plus the PyOp
  bridge's copy of every input (onnxruntime-extensions 0.15.2 hands each input over as a fresh NumPy array).
  PyOp payload sizes are the graph's declared (planned) ones: an upper bound.
* **measured** (``--run``: a few training steps in this process, onnxcomp's session settings): minor faults
  per step, and the faults inside onnxcomp's PyOp hook by op type -- the codec's own NumPy / numba
  temporaries (decoded arrays, scratch, payloads) -- with the bytes the bridge actually copied in and out.

    MALLOC_MMAP_THRESHOLD_=131072 .venv/bin/python tools/fault_sources.py DIR comet.onnx [--base F] [--run 3]

Faults are counted with getrusage (they do not depend on the machine's load), so no timing lock is needed.
"""
from __future__ import annotations

import argparse
import collections
import json
import resource
import time
from pathlib import Path
from typing import Any

VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})   # ORT aliases their input
PYOP_DOMAIN = "ai.onnx.contrib"
PAGE = 4096
MMAP_THRESHOLD = 128 * 1024


def source_of(node: Any, baseline_names: set[str]) -> str:
    """Who made ``node`` (an onnx NodeProto of the transformed graph), for the fresh-bytes table."""
    name = node.name or ""
    if node.domain == PYOP_DOMAIN:
        return f"PyOp output (ORT buffer, bridge memcpy): {node.op_type}"
    if name in baseline_names:
        return f"baseline node: {node.op_type}"
    if "chunked" in name:
        return "inserted: chunked backward region"
    if "fp16" in name or "native_encode" in name:
        return "inserted: DPR fp16 (Clip, Casts)"
    if "bits" in name or "positive" in name:
        return "inserted: native sign bits (Greater, Cast, MatMulInteger, Gather)"
    return f"inserted: {node.op_type}"


def fresh_bytes(model_path: Path, baseline_names: set[str], threshold: int = MMAP_THRESHOLD) -> collections.Counter:
    """Bytes of fresh buffers >= ``threshold`` one step allocates, by ``source_of`` (plus the PyOp bridge's input
    copies), from the project's graph analysis."""
    import onnx

    from onnxcomp.analysis import analyze_model

    model = onnx.load(str(model_path), load_external_data=False)
    analysis = analyze_model(model)
    out: collections.Counter = collections.Counter()
    for info in analysis.tensors.values():
        if info.producer is None or not info.nbytes or info.nbytes < threshold:
            continue
        node = model.graph.node[info.producer]
        if node.op_type not in VIEWS:
            out[source_of(node, baseline_names)] += info.nbytes
    for node in model.graph.node:
        if node.domain != PYOP_DOMAIN:
            continue
        for name in node.input:
            info = analysis.tensors.get(name)
            if info is not None and info.nbytes and info.nbytes >= threshold:
                out[f"PyOp bridge input copy: {node.op_type}"] += info.nbytes
    return out


def predicted(model_path: Path, base_path: Path, threshold: int = MMAP_THRESHOLD) -> dict[str, Any]:
    """Fresh bytes by source of the graph and of the baseline, and their difference (sources that differ)."""
    import onnx

    base = onnx.load(str(base_path), load_external_data=False)
    names = {n.name for n in base.graph.node}
    graph, baseline = fresh_bytes(model_path, names, threshold), fresh_bytes(base_path, names, threshold)
    diff = {k: graph[k] - baseline[k] for k in sorted(set(graph) | set(baseline)) if graph[k] != baseline[k]}
    return {"threshold": threshold, "graph": dict(graph), "baseline": dict(baseline), "difference": diff}


class HookFaults:
    """Counts minor faults inside onnxcomp's PyOp hook, per op type, while installed (wraps ``pyops._fast_hook``
    as the bridge's hook; ``uninstall`` puts the plain hook back)."""

    def __init__(self, threshold: int = MMAP_THRESHOLD) -> None:
        self.threshold = threshold
        self.ops: dict[str, dict[str, float]] = {}

    def reset(self) -> None:
        self.ops = {}

    def hook(self, k_id: int, feed: Any, attributes: dict[str, str]) -> tuple:
        import numpy as np
        from onnxruntime_extensions import Opdef

        from onnxcomp.runtime import pyops

        op = Opdef._odlist.get(k_id)
        row = self.ops.setdefault(getattr(op, "op_type", f"id {k_id}"),
                                  {"calls": 0, "faults": 0, "seconds": 0.0, "bridge_in_bytes": 0, "out_bytes": 0})
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        result = pyops._fast_hook(k_id, feed, attributes)
        row["faults"] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        row["seconds"] += time.perf_counter() - t0
        row["calls"] += 1
        big = [np.asarray(v).nbytes for v in feed]
        row["bridge_in_bytes"] += sum(b for b in big if b >= self.threshold)
        outs = [np.asarray(v).nbytes for v in result[2::2] if isinstance(v, np.ndarray)]
        row["out_bytes"] += sum(b for b in outs if b >= self.threshold)
        return result

    def install(self) -> None:
        from onnxruntime_extensions import PyCustomOpDef

        from onnxcomp.runtime import pyops

        pyops.install_fast_hook()
        PyCustomOpDef.install_hooker(self.hook)

    def uninstall(self) -> None:
        from onnxruntime_extensions import PyCustomOpDef

        from onnxcomp.runtime import pyops

        PyCustomOpDef.install_hooker(pyops._fast_hook)


def measured(artifact_dir: Path, model_path: Path, steps: int = 3, warmup: int = 1) -> dict[str, Any]:
    """Minor faults per step (median over ``steps`` after ``warmup``) and the faults inside each PyOp's hook in
    the last step, with onnxcomp's session settings and this process's allocator."""
    import statistics

    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    counter = HookFaults()
    counter.install()
    try:
        session = open_artifact_session(artifact_dir, model_path, settings=RuntimeSettings())
        spec = graph_data(artifact_dir, model_path, list(session.module.input_names()))
        batches = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
        per_step = []
        for i in range(warmup + steps):
            x, y = next(batches)
            counter.reset()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            session.step(x, y)
            if i >= warmup:
                per_step.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    finally:
        counter.uninstall()
    in_hook = sum(r["faults"] for r in counter.ops.values())
    return {"step_faults": per_step, "step_faults_median": statistics.median(per_step), "pyop_hook": counter.ops,
            "in_hook_faults": in_hook}


def main(argv: list[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="artifact directory")
    ap.add_argument("graph", help="transformed training graph (a file in DIR or a path)")
    ap.add_argument("--base", default="training_model.onnx", help="baseline graph (default: DIR/training_model.onnx)")
    ap.add_argument("--threshold", type=int, default=MMAP_THRESHOLD, help="fresh-mapping size in bytes")
    ap.add_argument("--run", type=int, default=0, metavar="STEPS", help="also train STEPS steps and count faults")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    graph, base = args.dir / args.graph, args.dir / args.base
    result: dict[str, Any] = {"graph": str(graph), "base": str(base),
                              "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default"),
                              "predicted": predicted(graph, base, args.threshold)}
    pred = result["predicted"]
    print(f"predicted fresh buffers >= {args.threshold} B per step: {sum(pred['graph'].values()) / PAGE / 1e3:.1f} K "
          f"pages (baseline {sum(pred['baseline'].values()) / PAGE / 1e3:.1f} K); difference by source:")
    for k, v in sorted(pred["difference"].items(), key=lambda kv: -abs(kv[1])):
        print(f"  {k:72s} {v / PAGE / 1e3:+7.1f} K pages ({v / 2**20:+7.1f} MiB)")
    if args.run:
        for label, path in (("baseline", base), ("graph", graph)):
            m = measured(args.dir, path, steps=args.run)
            result[f"measured_{label}"] = m
            print(f"measured, {label} ({result['malloc_mmap_threshold']}): {m['step_faults_median']:.0f} minor faults "
                  f"per step; inside onnxcomp's PyOp hook {m['in_hook_faults']}")
            for op, r in sorted(m["pyop_hook"].items()):
                print(f"  {op:36s} calls {r['calls']:4d}  faults {r['faults']:7d}  bridge in "
                      f"{r['bridge_in_bytes'] / PAGE / 1e3:6.1f} K pages  out {r['out_bytes'] / PAGE / 1e3:6.1f} K pages")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
