"""Side by side: what a user would otherwise run against onnxcomp, each configuration in a fresh process.

    python tools/bench_side_by_side.py --artifacts DIR [--policies lossless] [--graph LABEL=GRAPHDIR ...] \\
        [--settings onnxcomp,ort-defaults] [--steps 4] [--rounds 1] [--lock /tmp/timing.lock] [--json out.json]

DIR: `onnxcomp artifacts --model resnet18 --batch 32 --image 64 --classes 10 -o DIR`. The PyTorch rows load the
artifacts' checkpoint weights, so every row starts from the same parameters and trains on the same seeded
synthetic batches (onnxcomp.runtime.data.synthetic_batches), AdamW at lr 1e-3, cross-entropy.

Rows, all in one run:
  pytorch-eager, pytorch-checkpoint (torch.utils.checkpoint, one segment per residual stage / 4 segments of a
  `features` stack), pytorch-checkpoint-dense (also the ResNet stem as a segment / 8 segments), pytorch-fp16-hooks (saved-tensor hooks storing float32 activations as float16);
  ORT baseline @ ort-defaults: the untouched graph, plain SessionOptions (arena, mem pattern, mem reuse, DEFAULT
  order) after a plain `import onnxruntime` (which imports torch): what a user has;
  ORT baseline @ onnxcomp: the untouched graph under onnxcomp's settings (arena, pattern, reuse off, PRIORITY
  order; lean import);
  one row per onnxcomp graph and per `--settings` entry: `--policies` transformed here (into a directory), and
  `--graph LABEL=GRAPHDIR` directories written by `onnxcomp transform ... -o GRAPHDIR` (e.g. `auto --exact` at its
  tightest budget, either budget mode: a directory carries a plan's spacer parameters and split weights).
  Graph rows load the graph's codec kernels at set-up, as `onnxcomp measure` and `train` do (codec_kernel_bytes).

Measurement, the same as `onnxcomp measure` (onnxcomp.runtime.proc_memory.measure_call, docs/notes/peakjump.md):
glibc's mmap threshold pinned at 128 KiB in every child (MALLOC_MMAP_THRESHOLD_), and every baseline (set-up's RSS
and each step's pre-step RSS) read after malloc_trim(0), so a step's peak counts every heap page it touches above
the live data, including free heap pages an untrimmed baseline would have counted as already there. Per row:
step peak = max over measured steps of (VmHWM - trimmed RSS before the step), VmHWM reset before each step; process
peak = the process's VmHWM over its whole life (imports, set-up, steps); growth = max VmHWM during the steps -
trimmed RSS after set-up (measure's growth_bytes); step time = median of the measured steps; loss Δ = max over steps
of |loss - reference|. `--no-trim-heap` gives the old, untrimmed baselines (comparison with earlier figures only).
Step times compare only within one run (shared machine): `--lock` holds an flock around each row, `--rounds N`
runs the whole row sequence N times (interleaved) and pools the steps.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from onnxcomp.fileio import held_flock
from onnxcomp.runtime.proc_memory import status_bytes
from onnxcomp.runtime.step_meter import StepMeter

MiB = 1 << 20
# What `onnxcomp measure` pins in its children (runtime.measure.MALLOC_ENV; not imported: that module imports
# onnxruntime, which the PyTorch rows must not load).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
TORCH_ROWS = ("pytorch-eager", "pytorch-checkpoint", "pytorch-checkpoint-dense", "pytorch-fp16-hooks")
ORT_DEFAULTS = "ORT baseline @ ort-defaults"
ORT_ONNXCOMP = "ORT baseline @ onnxcomp"
# Session settings an ORT row runs under (runtime.session.RuntimeSettings fields).
SETTINGS: dict[str, dict[str, Any]] = {
    "onnxcomp": {"arena": False, "mem_pattern": False, "mem_reuse": False, "execution_order": "priority"},
    "ort-defaults": {"arena": True, "mem_pattern": True, "mem_reuse": True, "execution_order": "default"},
}


def _batches(meta: dict, steps: int) -> list[tuple[Any, Any]]:
    from onnxcomp.runtime.data import synthetic_batches

    gen = synthetic_batches(tuple(meta["inputs"]["input"]), int(meta["classes"]), seed=0)
    return [next(gen) for _ in range(steps)]


def _checkpoint_stages(model: Any, dense: bool = False) -> None:
    """torch.utils.checkpoint, one segment per residual stage (layer1..4) or 4 segments of a `features` stack.

    ``dense``: what a user who checkpoints more would write: a ResNet's stem (conv1, bn1, relu, maxpool: at 64×64
    its three full-size maps are most of what the stage-level segments leave stashed) as a segment of its own too;
    a `features` stack in 8 segments."""
    import torch
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    stages = [n for n in ("layer1", "layer2", "layer3", "layer4") if hasattr(model, n)]
    for name in stages:
        stage = getattr(model, name)
        stage.forward = (lambda s: (lambda x: checkpoint(type(s).forward, s, x, use_reentrant=False)))(stage)
    if dense and stages and all(hasattr(model, n) for n in ("conv1", "bn1", "relu", "maxpool")):
        stem = torch.nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        stem.forward = (lambda s: (lambda x: checkpoint(torch.nn.Sequential.forward, s, x,
                                                        use_reentrant=False)))(stem)
        # The model's forward calls the four in a row: the first runs the whole checkpointed stem.
        model.conv1, model.bn1, model.relu, model.maxpool = stem, torch.nn.Identity(), torch.nn.Identity(), \
            torch.nn.Identity()
    if not stages and hasattr(model, "features"):
        feats = model.features
        segments = 8 if dense else 4
        feats.forward = lambda x: checkpoint_sequential(type(feats)(*feats), segments, x, use_reentrant=False)


def run_torch(cfg: dict) -> dict:
    import numpy as np
    import torch

    from onnxcomp.models import build_model

    if cfg.get("threads"):
        torch.set_num_threads(cfg["threads"])
    art = Path(cfg["artifacts"])
    meta = json.loads((art / "onnxcomp.json").read_text())
    model = build_model(meta["model"], int(meta["classes"]))
    with np.load(cfg["params"]) as params:  # written by the parent: this process never loads ORT
        model.load_state_dict({k: torch.from_numpy(params[k]) for k in params.files}, strict=False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    kind = cfg["row"]
    if kind in ("pytorch-checkpoint", "pytorch-checkpoint-dense"):
        _checkpoint_stages(model, dense=kind == "pytorch-checkpoint-dense")
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
    meter = StepMeter(trim=cfg.get("trim", True))
    meter.setup_done()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        with hooks if hooks is not None else contextlib.nullcontext():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)

    losses = [meter.step(lambda: step(x, y)) for x, y in batches]
    return meter.result(losses) | {"threads": torch.get_num_threads()}


def run_ort(cfg: dict) -> dict:
    art = Path(cfg["artifacts"])
    graph_dir = Path(cfg["graph"]) if cfg.get("graph") else art
    if cfg.get("plain_import"):
        import onnxruntime as ort

        so = ort.SessionOptions()  # ORT's own defaults, nothing of onnxcomp's
    else:
        import onnxcomp.runtime  # noqa: F401  (first: its lean import keeps torch out of onnxruntime's import)
        from onnxcomp.runtime.session import RuntimeSettings

        so = RuntimeSettings(**SETTINGS[cfg["settings"]]).session_options()
    if cfg.get("threads"):
        so.intra_op_num_threads = cfg["threads"]
    from onnxcomp.runtime._measure_worker import _load_codec_kernels
    from onnxcomp.runtime.training_session import loss_value, open_artifact_session

    meta = json.loads((art / "onnxcomp.json").read_text())
    model_path = graph_dir / "training_model.onnx"
    session = open_artifact_session(graph_dir, model_path, session_options=so, learning_rate=1e-3, adaptive=True)
    batches = _batches(meta, cfg["steps"] + 1)
    # The codec kernels (numba's runtime, when a graph's codecs use it) load at set-up, as measure and train do,
    # so growth is the step's; their cost is reported on its own.
    rss = status_bytes("VmRSS")
    _load_codec_kernels(model_path)
    codec_kernel_bytes = status_bytes("VmRSS") - rss
    meter = StepMeter(trim=cfg.get("trim", True))
    meter.setup_done()
    losses = [meter.step(lambda: loss_value(session.step(x, y))) for x, y in batches]
    return meter.result(losses) | {"codec_kernel_bytes": codec_kernel_bytes, "intra_op_threads": so.intra_op_num_threads}


def child(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    result = run_torch(cfg) if cfg["row"] in TORCH_ROWS else run_ort(cfg)
    result["torch_imported"] = "torch" in sys.modules
    result["malloc_mmap_threshold"] = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    print(json.dumps(result), flush=True)
    return 0


def run_row(cfg: dict, lock: str | None = None) -> dict:
    """One row in a fresh process (the environment `onnxcomp measure` pins); its figures, the load around it."""
    env = {**os.environ, **MALLOC_ENV}
    if cfg.get("plain_import"):
        env["ONNXCOMP_FULL_ORT_IMPORT"] = "1"  # what a user gets from `import onnxruntime`
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    try:
        with held_flock(lock or None):
            load_before = os.getloadavg()
            proc = subprocess.run([sys.executable, __file__, "--child", f.name], capture_output=True, text=True,
                                  env=env)
            load_after = os.getloadavg()
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise SystemExit(f"{cfg['row']} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"load_before": load_before, "load_after": load_after}


def pooled(runs: list[dict]) -> dict:
    """A row's figures over its rounds: peaks and growth the max, step time the median of every measured step."""
    out = dict(runs[-1])
    for key in ("step_peak", "process_peak", "growth"):
        out[key] = max(r[key] for r in runs)
    out["step_times"] = [t for r in runs for t in r["step_times"]]
    out["step_time"] = statistics.median(out["step_times"])
    out["rounds"] = len(runs)
    return out


def render(label: str, meta: dict, steps: int, results: dict[str, dict], trim: bool = True) -> str:
    """The Markdown table (step times are medians; compare them only within one run)."""
    ref = results["pytorch-eager"]["losses"] if "pytorch-eager" in results else None
    base = results.get(ORT_DEFAULTS)
    lines = [f"{label}, batch {meta['batch']}, input {meta['inputs']['input'][1:]}, {meta['classes']} classes, "
             f"{steps} steps after 1 warm-up (fresh process per row, MALLOC_MMAP_THRESHOLD_=131072, "
             f"baselines {'after malloc_trim(0)' if trim else 'untrimmed'})", "",
             "| configuration | step peak | process peak | growth over set-up | step time | vs eager time | "
             "loss Δ vs eager | loss Δ vs ORT baseline | torch imported |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    eager_t = results["pytorch-eager"]["step_time"] if "pytorch-eager" in results else None
    for row, r in results.items():
        d_eager = f"{max(abs(a - b) for a, b in zip(r['losses'], ref)):.1e}" if ref else "-"
        d_ort = f"{max(abs(a - b) for a, b in zip(r['losses'], base['losses'])):.1e}" if base else "-"
        rel = f"{r['step_time'] / eager_t:.2f}×" if eager_t else "-"
        lines.append(f"| {row} | {r['step_peak'] / MiB:.1f} MiB | {r['process_peak'] / MiB:.1f} MiB | "
                     f"{r['growth'] / MiB:.1f} MiB | {r['step_time'] * 1000:.0f} ms | {rel} | {d_eager} | {d_ort} | "
                     f"{'yes' if r['torch_imported'] else 'no'} |")
    return "\n".join(lines)


def plan_rows(art: Path, graphs: list[tuple[str, Path]], settings: list[str], torch_rows: bool = True,
              ) -> list[dict]:
    """Every row's child config (without steps/threads/params), in the order they run."""
    for s in settings:
        if s not in SETTINGS:
            raise SystemExit(f"--settings: unknown {s!r}; use {', '.join(SETTINGS)}")
    rows: list[dict] = [{"row": r} for r in TORCH_ROWS] if torch_rows else []
    rows.append({"row": ORT_DEFAULTS, "plain_import": True, "settings": "ort-defaults"})
    rows.append({"row": ORT_ONNXCOMP, "settings": "onnxcomp"})
    for label, graph in graphs:
        for s in settings:
            rows.append({"row": f"onnxcomp {label} @ {s}", "graph": str(graph), "settings": s})
    return [r | {"artifacts": str(art)} for r in rows]


def _graph_arg(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"--graph {text!r}: use LABEL=DIR (a directory from `onnxcomp transform`)")
    p = Path(path)
    if not (p / "training_model.onnx").is_file() or not (p / "checkpoint").exists():
        raise argparse.ArgumentTypeError(f"--graph {text!r}: {p} has no training_model.onnx and checkpoint; write it "
                                         "with `onnxcomp transform ARTIFACTS -o DIR ...` (a directory, not a .onnx)")
    return label, p


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--model", help="label for the table (default: onnxcomp.json's model)")
    p.add_argument("--artifacts", type=Path, help="artifact directory from `onnxcomp artifacts`")
    p.add_argument("--policies", default="lossless", help="onnxcomp policies transformed here (comma-separated)")
    p.add_argument("--graph", action="append", type=_graph_arg, default=[], metavar="LABEL=DIR",
                   help="an already transformed artifact directory (repeatable)")
    p.add_argument("--settings", default="onnxcomp,ort-defaults",
                   help="session settings each onnxcomp graph runs under (comma-separated: onnxcomp, ort-defaults)")
    p.add_argument("--no-torch", action="store_true", help="leave the PyTorch rows out")
    p.add_argument("--steps", type=int, default=4, help="measured steps after one warm-up step")
    p.add_argument("--rounds", type=int, default=1, help="run the whole row sequence this many times (interleaved)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads for every row (default: library's)")
    p.add_argument("--lock", help="flock this file around each row (timing runs on a shared machine)")
    p.add_argument("--no-trim-heap", action="store_true", help="old, untrimmed baselines (comparisons only)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    p.add_argument("--table", type=Path, help="print the table of an earlier run's --json and exit")
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.table:
        saved = json.loads(args.table.read_text())
        print(render(saved["model"], saved["meta"], saved["steps"], saved["rows"], saved.get("trim_heap", True)))
        return 0
    if args.artifacts is None:
        p.error("--artifacts is required")
    if args.steps < 1 or args.rounds < 1:
        p.error("--steps and --rounds must be >= 1")
    import numpy as np

    from onnxcomp.runtime.checkpoint import merged_parameters
    from onnxcomp.transform import transform

    meta = json.loads((args.artifacts / "onnxcomp.json").read_text())
    label = args.model or meta["model"]
    trim = not args.no_trim_heap
    with tempfile.TemporaryDirectory(prefix="onnxcomp-side-by-side-") as tmp:
        params = Path(tmp) / "params.npz"
        np.savez(params, **merged_parameters(args.artifacts))
        graphs = list(args.graph)
        for policy in [x for x in args.policies.split(",") if x]:
            out = Path(tmp) / policy
            print(f"transforming {policy} ...", file=sys.stderr, flush=True)
            transform(args.artifacts, out, policy)
            graphs.append((policy, out))
        rows = plan_rows(args.artifacts, graphs, [s for s in args.settings.split(",") if s], not args.no_torch)
        runs: dict[str, list[dict]] = {r["row"]: [] for r in rows}
        for k in range(args.rounds):
            for cfg in rows:
                print(f"round {k + 1}: {cfg['row']} ...", file=sys.stderr, flush=True)
                runs[cfg["row"]].append(run_row(cfg | {"steps": args.steps, "threads": args.threads,
                                                       "params": str(params), "trim": trim}, args.lock))
    results = {row: pooled(rs) | {"config": {k: v for k, v in cfg.items() if k != "artifacts"}}
               for (row, rs), cfg in zip(runs.items(), rows)}
    print(render(label, meta, args.steps, results, trim))
    if args.json:
        args.json.write_text(json.dumps({"model": label, "meta": meta, "steps": args.steps, "rounds": args.rounds,
                                         "trim_heap": trim, "settings": SETTINGS, "rows": results,
                                         "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
