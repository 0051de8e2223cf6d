"""Where in a training step does the memory peak? Measured RSS per ORT node, against the planner.

`onnxcomp measure` gives one number per step; when it disagrees with the planner, this says where. A fresh
process (allocator pinned as in `measure`) runs warm-up steps, then one step with ORT's profiler on, while a
sampler process reads its RSS from /proc every ~0.2 ms. Each sample is attributed to the node ORT was
running (the profiler's kernel events, aligned on the step's start), and the per-node maximum is compared
with the planner's live bytes at that node (in the order ORT ran them).

    python tools/memory_timeline.py /tmp/vgg --model lossless.onnx --top 15 [--png timeline.png]

Output: the step's peak, the nodes around it, and the nodes where measured exceeds planned the most.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def sampler(pid: int, out: str, stop: str) -> None:
    """Child: sample the RSS of `pid` until the file `stop` exists; write (t, rss) pairs as JSON."""
    samples: list[tuple[float, int]] = []
    while not os.path.exists(stop):
        try:
            samples.append((time.time(), _rss(pid)))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.0002)
    Path(out).write_text(json.dumps(samples))


def worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """Child: warm up, then one profiled step sampled by a grandchild; returns timeline data."""
    import onnxruntime as ort

    from onnxcomp.runtime.data import digits_dataset, graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    ort.set_default_logger_severity(3)
    art, model = Path(cfg["artifact_dir"]), Path(cfg["model"])
    tmp = Path(cfg["tmp"])
    settings = RuntimeSettings(execution_order=cfg["order"], profile=str(tmp / "prof"))
    session = open_artifact_session(art, model, settings=settings, bounds=cfg.get("error_bounds", {}))
    spec = graph_data(art, model, list(session.module.input_names()))
    gen = (digits_dataset(spec.image.shape, spec.classes).train_batches(0) if cfg["data"] == "digits"
           else synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype))
    batches = [next(gen) for _ in range(cfg["warmup"] + 1)]
    for x, y in batches[:-1]:
        session.step(x, y)
    stop, samples_path = tmp / "stop", tmp / "samples.json"
    proc = subprocess.Popen([sys.executable, __file__, "--sampler", str(os.getpid()), str(samples_path),
                             str(stop)])
    time.sleep(0.3)
    pre = _rss(os.getpid())
    x, y = batches[-1]
    t0 = time.time()
    session.forward_backward(x, y)
    t1 = time.time()
    stop.touch()
    proc.wait()
    session.close()   # ORT writes the profile when the session goes
    return {"pre": pre, "t0": t0, "t1": t1, "samples": json.loads(samples_path.read_text()),
            "traces": [str(p) for p in tmp.glob("prof*.json")]}


def _kernel_events(traces: list[Path]) -> list[tuple[str, float, float]]:
    """(node name, start µs, duration µs) of the sampled step's kernels, in run order: the last model_run
    of the training session's trace (the one with the most kernel events; the optimizer writes its own)."""
    def kernels(events: list[dict]) -> list[dict]:
        return [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]

    events = max((json.loads(t.read_text()) for t in traces), key=lambda ev: len(kernels(ev)))
    run = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][-1]
    lo, hi = float(run["ts"]), float(run["ts"]) + float(run["dur"])
    return [(e["name"][: -len("_kernel_time")], float(e["ts"]), float(e["dur"]))
            for e in kernels(events) if lo <= float(e["ts"]) <= hi]


def timeline(art: Path, model: Path, order: str = "priority", data: str = "digits", warmup: int = 2,
             error_bounds: dict[str, float] | None = None) -> dict[str, Any]:
    from onnxcomp.runtime.measure import MALLOC_ENV

    with tempfile.TemporaryDirectory(prefix="onnxcomp-timeline-") as tmp:
        cfg = {"artifact_dir": str(art), "model": str(model), "order": order, "data": data, "warmup": warmup,
               "tmp": tmp, "error_bounds": error_bounds or {}}
        cfg_path, out_path = Path(tmp) / "cfg.json", Path(tmp) / "out.json"
        cfg_path.write_text(json.dumps(cfg))
        subprocess.run([sys.executable, __file__, "--worker", str(cfg_path), str(out_path)],
                       env={**os.environ, **MALLOC_ENV}, check=True, cwd=tmp)
        r = json.loads(out_path.read_text())
        events = _kernel_events([Path(p) for p in r["traces"]])
    # Align: the step's first kernel starts when module() was called (within a millisecond).
    base_us = events[0][1]
    per_node: list[dict[str, Any]] = []
    samples = [(t, rss) for t, rss in r["samples"] if r["t0"] <= t <= r["t1"] + 0.01]
    k = 0
    for name, ts, dur in events:
        start, end = r["t0"] + (ts - base_us) / 1e6, r["t0"] + (ts - base_us + dur) / 1e6
        while k < len(samples) and samples[k][0] < start:
            k += 1
        j, peak = k, None
        while j < len(samples) and samples[j][0] <= end:
            peak = max(peak or 0, samples[j][1] - r["pre"])
            j += 1
        per_node.append({"node": name, "ms": dur / 1e3, "measured": peak})
    # Nodes too short to be sampled inherit the last reading before them.
    last = 0
    for row in per_node:
        row["measured"] = last = row["measured"] if row["measured"] is not None else last
    _add_planned(per_node, model)
    peak = max(rss for _, rss in samples) - r["pre"] if samples else 0
    return {"peak": peak, "nodes": per_node}


def _add_planned(per_node: list[dict[str, Any]], model_path: Path) -> None:
    """The planner's live bytes at each node, in the order ORT ran them (fused nodes keep their inputs)."""
    import onnx

    from onnxcomp.analysis import analyze_model
    from onnxcomp.planner.buffers import live_bytes

    model = onnx.load(str(model_path), load_external_data=False)
    by_name = {n.name: n for n in model.graph.node}
    ran = [row["node"].removeprefix("fused ") for row in per_node]
    order = [by_name[n] for n in ran if n in by_name]
    placed = {id(n) for n in order}
    for n in model.graph.node:   # nodes ORT fused away or folded: right after their inputs' producers
        if id(n) not in placed:
            made = {o: k for k, m in enumerate(order) for o in m.output}
            order.insert(max((made[x] + 1 for x in n.input if x in made), default=0), n)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(order)
    live = live_bytes(analyze_model(out).buffers(), len(order))
    index = {n.name: k for k, n in enumerate(order)}
    for row, name in zip(per_node, ran):
        row["planned"] = int(live[index[name]]) if name in index else None


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--sampler":
        sampler(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        cfg = json.loads(Path(sys.argv[2]).read_text())
        Path(sys.argv[3]).write_text(json.dumps(worker(cfg)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifact_dir", type=Path)
    ap.add_argument("--model", default="training_model.onnx")
    ap.add_argument("--order", default="priority", choices=["priority", "default"])
    ap.add_argument("--data", default="digits", choices=["digits", "synthetic"])
    ap.add_argument("--bounds", type=Path, help="JSON with run-time error bounds (onnxcomp train --json)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--png", type=Path)
    ap.add_argument("--json", type=Path, help="write every node's measured and planned bytes here")
    args = ap.parse_args()
    art = args.artifact_dir.resolve()
    model = (art / args.model) if not Path(args.model).is_absolute() else Path(args.model)
    from onnxcomp.runtime.bounds import load_bounds_file

    bounds = load_bounds_file(args.bounds) if args.bounds else None
    t = timeline(art, model, args.order, args.data, error_bounds=bounds)
    rows = t["nodes"]
    mib = 2 ** 20
    k = max(range(len(rows)), key=lambda i: rows[i]["measured"])
    print(f"step peak {t['peak'] / mib:.1f} MiB over pre-step RSS; at node {k}/{len(rows)}: {rows[k]['node']}")
    print(f"{'#':>4} {'measured':>9} {'planned':>9} {'ms':>7}  node")
    for i in range(max(0, k - args.top // 2), min(len(rows), k + args.top // 2 + 1)):
        r = rows[i]
        pl = f"{r['planned'] / mib:9.1f}" if r["planned"] is not None else f"{'?':>9}"
        print(f"{i:4d} {r['measured'] / mib:9.1f} {pl} {r['ms']:7.2f}  {r['node']}")
    if args.json:
        args.json.write_text(json.dumps(t, indent=1))
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(10, 4))
        ax.plot([r["measured"] / mib for r in rows], label="measured (RSS over pre-step)")
        ax.plot([(r["planned"] or 0) / mib for r in rows], label="planner live bytes")
        ax.set_xlabel("node, in ORT's run order")
        ax.set_ylabel("MiB")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
