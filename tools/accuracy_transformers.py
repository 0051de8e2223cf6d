"""Lossy policies on transformers: ViT-tiny test accuracy (digits) and GPT-tiny validation loss (stdlib text).

Trains the untouched training graph ("baseline") and each policy's rewrite of it for the same steps, with the
same initial parameters and the same batch order per seed (the seed draws the batch order and ORT's dropout
stream), evaluating along the way. Every run is stored as its own JSON under ``--workdir`` and reused when
present, so policies and seeds can be added by later invocations (and a cut-short invocation resumes);
``--report`` only collates what is there. Output per model, in ``--out``: curves (PNG, mean over seeds with
each seed thin), a table of the final metric (mean ± std, paired deltas vs baseline by seed; Markdown) and
every number (JSON).

The pseudo-policy ``exact-ulp`` is the noise floor of a paired comparison: the untouched (exact) graph from
initial parameters each moved by one ulp in a random direction (a fixed draw, not the run seed). Any rounding-level
change of a step knocks a training off its exact trajectory just as much; what the final metric then moves by
under the same batches and dropout stream is what a lossy policy's paired delta must be judged against.

    onnxcomp artifacts --model vit_tiny --batch 16 --image 32 --classes 10 -o art/vit
    onnxcomp artifacts --model gpt_tiny --batch 16 --seq 128 --classes 96 -o art/gpt
    python tools/accuracy_transformers.py --model vit_tiny --art art/vit --steps 200 --eval-every 25 \\
        --policies baseline dpr-fp16 dpr-fp8 comet --seeds 0 1 2 --out docs/transformers
    python tools/accuracy_transformers.py --model gpt_tiny --art art/gpt --steps 120 --eval-every 20 ...
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# What each model is judged by: (data source, metric key in a run record, label, higher is better).
METRICS = {
    "vit_tiny": ("digits", "accuracy", "test accuracy, %", True),
    "gpt_tiny": ("text", "val_loss", "validation loss (nats/char)", False),
}


def _write_json(path: Path, obj: Any) -> None:
    """Atomically: a cut-short run never leaves a half-written record that a later invocation would reuse."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.chmod(tmp, 0o644)   # mkstemp's 0600 would survive the rename
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


# Pseudo-policy: the exact graph from one-ulp-perturbed initial parameters (see the module docstring).
PERTURBED = "exact-ulp"
PERTURB_SEED = 20261124


def _perturbed_artifacts(art: Path, work: Path) -> Path:
    """A copy of ``art`` whose checkpoint has every trainable parameter moved by one ulp (float32
    nextafter, towards +inf or -inf at random, fixed draw); made once into ``work``. Written the way
    onnxcomp.runtime.checkpoint writes split checkpoints (Parameter.data's setter segfaults here)."""
    import shutil

    import numpy as np
    import onnx
    from onnxruntime.training.api import CheckpointState
    from onnxruntime.training.onnxblock.checkpoint_utils import save_checkpoint

    out = work / f"artifacts-{PERTURBED}"
    if (out / "checkpoint").exists():
        return out
    tmp = work / f".artifacts-{PERTURBED}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(art, tmp)
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    rng = np.random.default_rng(PERTURB_SEED)
    trainable: list[onnx.TensorProto] = []
    frozen: list[onnx.TensorProto] = []
    for name, param in state.parameters:
        data = np.array(param.data)
        if param.requires_grad:
            if data.dtype != np.float32:
                raise SystemExit(f"{art}: parameter {name} is {data.dtype}; the one-ulp perturbation assumes float32")
            direction = np.where(rng.random(data.shape) < 0.5, -np.inf, np.inf).astype(np.float32)
            data = np.nextafter(data, direction).astype(np.float32)
        (trainable if param.requires_grad else frozen).append(onnx.numpy_helper.from_array(data, name))
    if not trainable:
        raise SystemExit(f"{art}: no trainable parameter to perturb")
    properties = list(state.properties)
    (tmp / "checkpoint").unlink()
    save_checkpoint((trainable, frozen), str(tmp / "checkpoint"))
    if properties:
        new = CheckpointState.load_checkpoint(str(tmp / "checkpoint"))
        for key, value in properties:
            new.properties[key] = value
        CheckpointState.save_checkpoint(new, str(tmp / "checkpoint"))
    os.replace(tmp, out)
    return out


def _graph(art: Path, policy: str, work: Path) -> str | None:
    """The training graph of ``policy`` (None: the artifacts' own), transformed once into ``work``."""
    if policy in ("baseline", PERTURBED):
        return None
    from onnxcomp.transform import transform

    out = work / f"{policy}.onnx"
    if not out.exists():
        result = transform(art, out, policy, force=True)
        _write_json(work / f"{policy}.transform.json", {
            "encoded": len(result.records), "codecs": sorted({str(r["codec"]) for r in result.records}),
            "planner_before": result.before["offset_bytes"], "planner_after": result.after["offset_bytes"]})
    return str(out)


def run_one(model: str, art: Path, policy: str, seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from onnxcomp.runtime.train import train

    from onnxcomp.runtime.session import RuntimeSettings

    data = METRICS[model][0]
    graph = _graph(art, policy, work)
    if policy == PERTURBED:
        art = _perturbed_artifacts(art, work)
    t0 = time.perf_counter()
    res = train(art, model=graph, steps=args.steps, data=data, seed=seed, eval_every=args.eval_every,
                progress=False, learning_rate=args.lr, warmup_steps=args.warmup,
                settings=RuntimeSettings(intra_threads=args.intra_threads))
    d = res.to_dict()
    d["wall_s"] = time.perf_counter() - t0
    d["policy"], d["model_name"] = policy, model
    return d


def _final(run: dict[str, Any], key: str) -> float:
    if key == "accuracy":
        return 100 * run["accuracy_history"][-1][1]
    return run["val_loss_history"][-1][1]


def _curve(run: dict[str, Any], key: str) -> tuple[list[int], list[float]]:
    hist = run["accuracy_history"] if key == "accuracy" else run["val_loss_history"]
    scale = 100 if key == "accuracy" else 1
    return [s for s, _ in hist], [scale * v for _, v in hist]


def report(model: str, work: Path, policies: list[str], seeds: list[int], out: Path) -> str:
    """Collate the stored runs of ``model``: PNG curves, Markdown table, JSON (in ``out``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, key, label, higher = METRICS[model]
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for policy in policies:
        for seed in seeds:
            f = work / "runs" / f"{policy}-s{seed}.json"
            if f.exists():
                runs.setdefault(policy, {})[seed] = json.loads(f.read_text())
    if "baseline" not in runs:
        return f"{model}: no baseline runs under {work}"
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (policy, by_seed) in enumerate(runs.items()):
        c = colours[k % len(colours)]
        curves = [_curve(r, key) for r in by_seed.values()]
        steps = curves[0][0]
        for s, v in curves:
            ax.plot(s, v, color=c, lw=0.5, alpha=0.4)
        mean = [statistics.fmean(v[i] for _, v in curves) for i in range(len(steps))]
        ax.plot(steps, mean, color=c, lw=1.8 if policy == "baseline" else 1.2,
                label=f"{policy} (mean of {len(curves)} seeds)")
    first = next(iter(runs["baseline"].values()))
    ax.set_xlabel("training step"), ax.set_ylabel(label)
    ax.set_title(f"{model}: {label} (data {first['data']}, thin lines: single seeds)")
    ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"accuracy_{model}.png", dpi=120)
    plt.close(fig)

    base = {s: _final(r, key) for s, r in runs["baseline"].items()}
    unit = "pp" if key == "accuracy" else "%"
    lines = [f"| policy | final {label} (mean ± std) | Δ vs baseline, paired by seed (mean ± standard error; "
             "sd; worst) | per seed | last 3 evaluations (mean over seeds) | final test cross-entropy (mean) | "
             "training loss, last 10 % of steps (mean) | step time (median) |", "|---|---|---|---|---|---|---|---|"]
    table: dict[str, Any] = {}
    for policy, by_seed in runs.items():
        finals = {s: _final(r, key) for s, r in by_seed.items()}
        paired = [s for s in finals if s in base]
        if key == "accuracy":   # percentage points
            deltas = [finals[s] - base[s] for s in paired]
        else:                   # relative change of the loss, %
            deltas = [100 * (finals[s] - base[s]) / base[s] for s in paired]
        worst = (min(deltas) if higher else max(deltas)) if deltas else float("nan")
        sd = statistics.stdev(deltas) if len(deltas) > 1 else float("nan")
        vals = list(finals.values())
        # Whether the runs have settled: the last three evaluations, each averaged over the seeds.
        curves = [_curve(r, key)[1] for r in by_seed.values()]
        tail = [statistics.fmean(c[i] for c in curves) for i in range(-min(3, min(map(len, curves))), 0)]
        table[policy] = {"finals": finals, "deltas": dict(zip(paired, deltas)), "mean": statistics.fmean(vals),
                         "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                         "delta_mean": statistics.fmean(deltas) if deltas else None,
                         "delta_sd": sd if deltas else None,
                         "delta_se": sd / len(deltas) ** 0.5 if len(deltas) > 1 else None,
                         "last_evaluations_mean": tail,
                         # the eval loss as well: a continuous figure, where accuracy moves in whole test samples
                         "final_eval_loss_mean": statistics.fmean(r["val_loss_history"][-1][1]
                                                                  for r in by_seed.values()),
                         "train_loss_tail_mean": statistics.fmean(
                             statistics.fmean(r["losses"][-max(1, len(r["losses"]) // 10):]) for r in by_seed.values()),
                         "step_time_s": statistics.median(r["step_time_s"] for r in by_seed.values())}
        t = table[policy]
        if policy == "baseline":
            paired_cell = "— | "
        elif deltas:
            paired_cell = (f"{t['delta_mean']:+.3f} ± {t['delta_se'] or float('nan'):.3f} {unit}; sd {sd:.3f}; "
                           f"worst {worst:+.3f} {unit} | ")
        else:
            paired_cell = "— | "
        lines.append(f"| {policy} | {t['mean']:.3f} ± {t['std']:.3f} | " + paired_cell
                     + ", ".join(f"s{s}: {v:.3f}" for s, v in sorted(finals.items()))
                     + " | " + ", ".join(f"{v:.3f}" for v in tail) + f" | {t['final_eval_loss_mean']:.4f}"
                     + f" | {t['train_loss_tail_mean']:.4f}"
                     + f" | {1000 * t['step_time_s']:.0f} ms |")
    md = "\n".join(lines) + "\n"
    (out / f"accuracy_{model}.md").write_text(md)
    _write_json(out / f"accuracy_{model}.json", {
        "model": model, "metric": key, "steps": first["steps"], "data": first["data"], "seeds": seeds,
        "table": table, "runs": {p: {str(s): r for s, r in bs.items()} for p, bs in runs.items()}})
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=sorted(METRICS))
    ap.add_argument("--art", type=Path, required=True, help="artifact directory (onnxcomp artifacts ...)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: the optimizer model's)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="linear warm-up steps, then linear decay to ~0 at the last step (default: constant rate)")
    ap.add_argument("--intra-threads", type=int, default=None,
                    help="ORT intra-op threads per run (default: ORT's; 1 avoids spinning on a loaded machine)")
    ap.add_argument("--policies", nargs="+", default=["baseline", "dpr-fp16", "dpr-fp8", "comet"],
                    help=f"policies to train; {PERTURBED!r}: the exact graph from one-ulp-perturbed initial "
                         "parameters (the paired comparison's noise floor)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/onnxcomp-accuracy-transformers"))
    ap.add_argument("--out", type=Path, default=Path("docs/transformers"))
    ap.add_argument("--report", action="store_true", help="only collate the stored runs")
    args = ap.parse_args()
    if not (args.art / "training_model.onnx").exists():
        sys.exit(f"{args.art}: no training_model.onnx; make the artifacts with `onnxcomp artifacts --model "
                 f"{args.model} ... -o {args.art}` first")
    schedule = "" if args.warmup is None else f"-lr{args.lr}-warmup{args.warmup}"
    threads = "" if args.intra_threads is None else f"-threads{args.intra_threads}"   # may change rounding
    work = args.workdir / f"{args.model}-{args.art.resolve().name}-{args.steps}steps{schedule}{threads}"
    if not args.report:
        for seed in args.seeds:          # seed-major: a cut-short invocation still has every policy paired
            for policy in args.policies:
                f = work / "runs" / f"{policy}-s{seed}.json"
                if f.exists():
                    continue
                d = run_one(args.model, args.art, policy, seed, args, work)
                _write_json(f, d)
                key = METRICS[args.model][1]
                print(f"{args.model} {policy:10s} seed {seed}: final {key} {_final(d, key):.4f}  "
                      f"{1000 * d['step_time_s']:.0f} ms/step  {d['wall_s']:.0f} s", flush=True)
    print(report(args.model, work, args.policies, args.seeds, args.out))


if __name__ == "__main__":
    main()
