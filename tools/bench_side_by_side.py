"""Side by side: what a user would otherwise run against onnxcomp, each configuration in a fresh process.

    python tools/bench_side_by_side.py --model resnet18 --artifacts DIR [--steps 4] [--json out.json]

DIR: `onnxcomp artifacts --model NAME --batch 32 --image 64 --classes 1000 -o DIR`. The PyTorch rows load the
artifacts' checkpoint weights, so every row starts from the same parameters and trains on the same seeded
synthetic batches (onnxcomp.runtime.data.synthetic_batches), AdamW at lr 1e-3, cross-entropy.

Rows: PyTorch eager; PyTorch with torch.utils.checkpoint (one segment per stage); PyTorch with fp16
saved-tensor hooks; ORT defaults (plain SessionOptions: arena, mem pattern, mem reuse on, DEFAULT order; plain
`import onnxruntime`, which imports torch); one row per onnxcomp policy (graph transformed here, onnxcomp's
settings: arena, mem pattern and mem reuse off, PRIORITY order; lean import, no torch).

Per row: step peak = max over steps of (VmHWM - RSS before the step), VmHWM reset before each step; process
peak = the process's VmHWM over its whole life (imports, set-up, steps); growth = process peak - RSS after
set-up; step time = median; loss Δ = max over steps of |loss - PyTorch eager's loss|. glibc's mmap threshold
is pinned at 128 KiB in every child (MALLOC_MMAP_THRESHOLD_), so freed tensors leave the process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from onnxcomp.runtime.proc_memory import reset_hwm, status_bytes

MiB = 1 << 20
TORCH_ROWS = ("pytorch-eager", "pytorch-checkpoint", "pytorch-fp16-hooks")
ORT_DEFAULTS = "ort-defaults"


class _Meter:
    """Per-step and whole-process peaks; VmHWM is reset before each step, so the process peak is the max of
    the high-water marks read before the first reset and after every step."""

    def __init__(self) -> None:
        self.process_peak = 0
        self.step_peaks: list[int] = []
        self.times: list[float] = []
        self.setup_rss = 0

    def setup_done(self) -> None:
        self.process_peak = max(self.process_peak, status_bytes("VmHWM"))
        self.setup_rss = status_bytes("VmRSS")

    def step(self, fn: Any) -> Any:
        pre = status_bytes("VmRSS")
        self.process_peak = max(self.process_peak, status_bytes("VmHWM"))
        reset_hwm()
        t0 = time.perf_counter()
        out = fn()
        self.times.append(time.perf_counter() - t0)
        hwm = status_bytes("VmHWM")
        self.step_peaks.append(hwm - pre)
        self.process_peak = max(self.process_peak, hwm)
        return out


def _batches(meta: dict, steps: int) -> list[tuple[Any, Any]]:
    from onnxcomp.runtime.data import synthetic_batches

    gen = synthetic_batches(tuple(meta["inputs"]["input"]), int(meta["classes"]), seed=0)
    return [next(gen) for _ in range(steps)]


def run_torch(cfg: dict) -> dict:
    import torch

    import numpy as np

    from onnxcomp.models import build_model

    torch.set_num_threads(cfg["threads"]) if cfg.get("threads") else None
    art = Path(cfg["artifacts"])
    meta = json.loads((art / "onnxcomp.json").read_text())
    model = build_model(meta["model"], int(meta["classes"]))
    with np.load(cfg["params"]) as params:  # written by the parent: this process never loads ORT
        model.load_state_dict({k: torch.from_numpy(params[k]) for k in params.files}, strict=False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    kind = cfg["row"]
    if kind == "pytorch-checkpoint":
        from torch.utils.checkpoint import checkpoint, checkpoint_sequential

        stages = [n for n in ("layer1", "layer2", "layer3", "layer4") if hasattr(model, n)]
        for name in stages:
            stage = getattr(model, name)
            stage.forward = (lambda s: (lambda x: checkpoint(type(s).forward, s, x, use_reentrant=False)))(stage)
        if not stages and hasattr(model, "features"):
            feats = model.features
            feats.forward = lambda x: checkpoint_sequential(type(feats)(*feats), 4, x, use_reentrant=False)
    hooks: Any = None
    if kind == "pytorch-fp16-hooks":
        def pack(t: torch.Tensor) -> Any:
            if t.dtype == torch.float32 and not isinstance(t, torch.nn.Parameter):
                return ("fp16", t.to(torch.float16))
            return ("raw", t)

        def unpack(p: Any) -> torch.Tensor:
            return p[1].to(torch.float32) if p[0] == "fp16" else p[1]

        hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in _batches(meta, cfg["steps"] + 1)]
    meter = _Meter()
    meter.setup_done()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        if hooks is not None:
            with hooks:
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)

    losses = [meter.step(lambda: step(x, y)) for x, y in batches]
    return _result(meter, losses)


def run_ort(cfg: dict) -> dict:
    art = Path(cfg["artifacts"])
    if cfg["row"] == ORT_DEFAULTS:
        import onnxruntime as ort

        so = ort.SessionOptions()
        model_path = art / "training_model.onnx"
    else:
        import onnxcomp.runtime  # noqa: F401  (first: its lean import keeps torch out of onnxruntime's import)
        from onnxcomp.runtime.session import RuntimeSettings

        so = RuntimeSettings().session_options()
        model_path = Path(cfg["graph"])
    if cfg.get("threads"):
        so.intra_op_num_threads = cfg["threads"]
    from onnxcomp.runtime.training_session import loss_value, open_artifact_session

    meta = json.loads((art / "onnxcomp.json").read_text())
    session = open_artifact_session(art, model_path, session_options=so, learning_rate=1e-3, adaptive=True)
    batches = _batches(meta, cfg["steps"] + 1)
    meter = _Meter()
    meter.setup_done()
    losses = [meter.step(lambda: loss_value(session.step(x, y))) for x, y in batches]
    return _result(meter, losses) | {"torch_imported": "torch" in sys.modules}


def _result(meter: _Meter, losses: list[float]) -> dict:
    # The first step is the warm-up: its peak includes one-time allocations (ORT's arena, lazy init).
    return {"step_peak": max(meter.step_peaks[1:]), "warmup_step_peak": meter.step_peaks[0],
            "process_peak": meter.process_peak, "growth": meter.process_peak - meter.setup_rss,
            "setup_rss": meter.setup_rss, "step_time": statistics.median(meter.times[1:]), "losses": losses[1:],
            "first_loss": losses[0]}


def child(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    result = run_torch(cfg) if cfg["row"] in TORCH_ROWS else run_ort(cfg)
    result["torch_imported"] = "torch" in sys.modules
    print(json.dumps(result), flush=True)
    return 0


def run_row(row: str, artifacts: Path, steps: int, graph: Path | None, threads: int | None, params: Path) -> dict:
    cfg = {"row": row, "artifacts": str(artifacts), "steps": steps, "graph": str(graph) if graph else None,
           "threads": threads, "params": str(params)}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    if row == ORT_DEFAULTS:
        env["ONNXCOMP_FULL_ORT_IMPORT"] = "1"  # what a user gets from `import onnxruntime`
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", f.name], capture_output=True, text=True, env=env)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise SystemExit(f"{row} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render(label: str, meta: dict, steps: int, results: dict[str, dict]) -> None:
    """The Markdown table (step times are medians; compare them only within one run)."""
    ref = results["pytorch-eager"]["losses"]
    base = results[ORT_DEFAULTS]
    print(f"\n{label}, batch {meta['batch']}, input {meta['inputs']['input'][1:]}, {steps} steps after 1 warm-up "
          "(fresh process per row, MALLOC_MMAP_THRESHOLD_=131072)\n")
    print("| configuration | step peak | process peak | growth over set-up | process peak vs ORT defaults | "
          "step time | loss Δ vs eager | loss Δ vs ORT defaults | torch imported |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for row, r in results.items():
        d_eager = max(abs(a - b) for a, b in zip(r["losses"], ref))
        d_ort = max(abs(a - b) for a, b in zip(r["losses"], base["losses"]))
        print(f"| {row} | {r['step_peak'] / MiB:.1f} MiB | {r['process_peak'] / MiB:.1f} MiB | {r['growth'] / MiB:.1f} MiB"
              f" | {base['process_peak'] / r['process_peak']:.2f}× | {r['step_time'] * 1000:.0f} ms | {d_eager:.1e} | "
              f"{d_ort:.1e} | {'yes' if r['torch_imported'] else 'no'} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--model", help="label for the table (default: onnxcomp.json's model)")
    p.add_argument("--artifacts", type=Path, help="artifact directory from `onnxcomp artifacts`")
    p.add_argument("--policies", default="lossless,comet", help="onnxcomp policies to run (comma-separated)")
    p.add_argument("--steps", type=int, default=4, help="measured steps after one warm-up step")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads for every row (default: library's)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    p.add_argument("--table", type=Path, help="print the table of an earlier run's --json and exit")
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.table:
        saved = json.loads(args.table.read_text())
        render(saved["model"], saved["meta"], saved["steps"], saved["rows"])
        return 0
    if args.artifacts is None:
        p.error("--artifacts is required")
    import numpy as np

    from onnxcomp.runtime.checkpoint import merged_parameters
    from onnxcomp.transform import transform

    meta = json.loads((args.artifacts / "onnxcomp.json").read_text())
    label = args.model or meta["model"]
    rows: list[tuple[str, Path | None]] = [(r, None) for r in (*TORCH_ROWS, ORT_DEFAULTS)]
    with tempfile.TemporaryDirectory(prefix="onnxcomp-side-by-side-") as tmp:
        params = Path(tmp) / "params.npz"
        np.savez(params, **merged_parameters(args.artifacts))
        for policy in [x for x in args.policies.split(",") if x]:
            graph = Path(tmp) / f"{policy}.onnx"
            transform(args.artifacts, graph, policy)
            rows.append((f"onnxcomp {policy}", graph))
        results = {}
        for row, graph in rows:
            print(f"running {row} ...", file=sys.stderr, flush=True)
            results[row] = run_row(row, args.artifacts, args.steps, graph, args.threads, params)
    render(label, meta, args.steps, results)
    if args.json:
        args.json.write_text(json.dumps({"model": label, "meta": meta, "steps": args.steps, "rows": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
