"""ORTModule with and without onnxcomp's passes, against PyTorch eager: memory, step time, loss difference.

    python tools/bench_ortmodule.py --model resnet18 --batch 32 --image 64 --classes 10 --steps 5 \
        --rows eager,ortmodule,ortmodule+lossless --json out.json

Every row runs in a fresh process (glibc's mmap threshold pinned at 128 KiB so freed tensors go back to the
OS), builds the model from the same seed, and trains on the same seeded synthetic batches with
torch.optim.AdamW(lr=1e-3) on a cross-entropy loss; `--warmup` steps first (ORTModule exports, builds its
gradient graph and session on the first), then `--steps` measured steps. Rows:
  eager                  PyTorch eager
  ortmodule              plain ORTModule (onnxcomp.ortmodule.wrap(policy="none"))
  ortmodule-recompute    ORTModule's own memory optimizer, level 2 (recompute subgraphs it finds)
  ortmodule+POLICY       onnxcomp's POLICY applied to ORTModule's gradient graph (wrap(policy=POLICY)),
                         PRIORITY_BASED order; ortmodule+POLICY@ortmodule keeps ORTModule's DEFAULT order
Figures, all from /proc/self/status, read as `onnxcomp measure` reads them (runtime.step_meter.StepMeter: every
baseline RSS after malloc_trim(0), docs/notes/peakjump.md; `--no-trim-heap` gives the old, untrimmed baselines):
  step peak    max over measured steps of VmHWM - VmRSS before the step (VmHWM reset per step): what one
               step allocates above what the process already holds. ORTModule's CPU arena keeps ORT's
               activations between steps, so for ORTModule rows this counts torch's share (outputs,
               gradients handed to PyTorch, optimizer temporaries) plus arena growth only.
  held         VmRSS after the last step - VmRSS before the first step (both trimmed): what training keeps (arena, ORT
               session and graphs, optimizer state, gradients).
  growth       process peak - VmRSS before the first step: the figure to compare across rows; it includes
               ORTModule's export and graph build on the first step.
  process peak VmHWM over the whole process (imports, model, export, steps).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from onnxcomp.runtime.proc_memory import status_bytes, trim_heap
from onnxcomp.runtime.step_meter import StepMeter

MiB = 1 << 20
# What `onnxcomp measure` pins in its children (runtime.measure.MALLOC_ENV; that module is not imported here: it
# imports onnxruntime before the row decides how).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    from onnxcomp.models import build_model

    torch.manual_seed(0)
    model = build_model(cfg["model"], cfg["classes"])
    model.train()
    row = cfg["row"]
    report = None
    if row != "eager":
        from onnxcomp.ortmodule import wrap

        name, _, order = row.partition("@")
        policy = "none" if name == "ortmodule" else name if name == "ortmodule-recompute" else name.split("+", 1)[1]
        model = wrap(model, policy=policy, execution_order=order or "priority")
        report = model.onnxcomp_report
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    n = cfg["warmup"] + cfg["steps"]
    shape = (cfg["batch"], 3, cfg["image"], cfg["image"])
    batches = [(torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)),
                torch.from_numpy(rng.integers(0, cfg["classes"], cfg["batch"]))) for _ in range(n)]

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)

    meter = StepMeter(trim=cfg.get("trim", True))
    meter.setup_done()  # trimmed RSS before the first step (warm-up included: ORTModule builds there)
    losses = [meter.step(lambda x=x, y=y: step(x, y)) for x, y in batches]
    if meter.trim:
        trim_heap()
    end_rss = status_bytes("VmRSS")
    w = cfg["warmup"]
    step_peaks, times = meter.step_peaks[w:], meter.times[w:]
    if report is not None and report.builds == 0 and report.policy not in ("none", "ortmodule-recompute"):
        raise RuntimeError("onnxcomp's hook never ran: ORTModule did not build a gradient graph")
    return {"row": row, "losses": losses, "step_peak": max(step_peaks), "step_peaks": step_peaks,
            "warmup_step_peaks": meter.step_peaks[:w], "held": end_rss - meter.setup_rss,
            "growth": max(meter.step_hwms) - meter.setup_rss, "process_peak": meter.process_peak,
            "start_rss": meter.setup_rss, "heap_trimmed": meter.trim, "start_trimmed": meter.setup_trimmed,
            "trimmed_per_step": meter.trimmed, "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
            "step_time_median": statistics.median(times), "step_times": times,
            "threads": torch.get_num_threads(), "wrap": report.summary() if report is not None else None}


def run_row(cfg: dict[str, Any], timeout: int) -> dict[str, Any]:
    env = dict(os.environ, **MALLOC_ENV)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", f.name], env=env, capture_output=True,
                              text=True, timeout=timeout)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        return {"row": cfg["row"], "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render(results: list[dict[str, Any]], cfg: dict[str, Any]) -> str:
    eager = next((r for r in results if r["row"] == "eager" and "error" not in r), None)
    plain = next((r for r in results if r["row"] == "ortmodule" and "error" not in r), None)
    lines = [f"{cfg['model']}, batch {cfg['batch']}, {cfg['image']}x{cfg['image']}, {cfg['classes']} classes, "
             f"{cfg['warmup']} warm-up + {cfg['steps']} measured steps",
             "| row | step peak | held | growth | process peak | growth vs ORTModule | step time (median) "
             "| max loss Δ vs eager | encoded stashes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['row']} | failed: {r['error'][:200]} |||||||")
            continue
        ratio = f"{plain['growth'] / r['growth']:.2f}x" if plain and r["growth"] > 0 else "-"
        dloss = (f"{max(abs(a - b) for a, b in zip(r['losses'], eager['losses'])):.1e}" if eager else "-")
        enc = r["wrap"].get("encoded", "-") if r.get("wrap") else "-"
        lines.append(f"| {r['row']} | {r['step_peak'] / MiB:.1f} MiB | {r['held'] / MiB:.1f} MiB | "
                     f"{r['growth'] / MiB:.1f} MiB | {r['process_peak'] / MiB:.1f} MiB | {ratio} | "
                     f"{r['step_time_median'] * 1e3:.0f} ms | {dloss} | {enc} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rows", default="eager,ortmodule,ortmodule-recompute,ortmodule+lossless,ortmodule+recompute")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per row")
    ap.add_argument("--no-trim-heap", action="store_true", help="old, untrimmed baselines (comparisons only)")
    ap.add_argument("--json", type=Path, help="write every row's figures here")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(Path(args.child).read_text()))))
        return 0
    base = {k: getattr(args, k) for k in ("model", "batch", "image", "classes", "warmup", "steps")}
    base["trim"] = not args.no_trim_heap
    results = []
    for row in args.rows.split(","):
        r = run_row(base | {"row": row}, args.timeout)
        results.append(r)
        print(f"{row}: " + (r["error"] if "error" in r else
                            f"step peak {r['step_peak'] / MiB:.1f} MiB, growth {r['growth'] / MiB:.1f} MiB, "
                            f"{r['step_time_median'] * 1e3:.0f} ms/step"), file=sys.stderr, flush=True)
    table = render(results, base)
    print(table)
    if args.json:
        out = {"config": base, "load_average": os.getloadavg(), "results": results, "table": table}
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
