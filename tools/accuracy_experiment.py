"""Lossy policies on real data: train baseline and each policy on scikit-learn digits, several seeds.

For one model from the zoo, generates ORT training artifacts once, transforms the training graph with every
policy asked for, trains each graph for the same steps and data order per seed, evaluates test accuracy
along the way, and writes accuracy curves (PNG), a final-accuracy table (mean ± std over seeds, markdown)
and every number (JSON).

    python tools/accuracy_experiment.py --model resnet18 --image 32 --batch 32 --steps 300 \
        --policies dpr-fp16 dpr-bf16 dpr-fp10 dpr-fp8 comet comet-static --seeds 0 1 2 --out docs/accuracy

A policy ``auto@SIZE`` is `--policy auto --budget SIZE MiB` (lossy techniques allowed), planned for this
batch and image size; ``auto-growth@SIZE`` the same with `--budget-for ort-defaults` (SIZE MiB of growth under
ORT's default session settings).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any


def _transform(art: Path, policy: str, out: Path, eb: float | None = None) -> dict[str, Any]:
    from onnxcomp.transform import transform

    if policy == "comet-static":
        result = transform(art, out, "comet", force=True, adaptive=False, eb=eb)
    elif _is_auto(policy):   # the budget planner's lossy plan for a budget in MiB: auto@12.3, auto-growth@13.5
        kind, size = policy.split("@", 1)
        extra = {"budget_for": "ort-defaults"} if kind == "auto-growth" else {}
        result = transform(art, out, "auto", force=True, budget_bytes=int(float(size) * 2**20), **extra)
    else:
        result = transform(art, out, policy, force=True)
    return {"encoded": len(result.records), "codecs": sorted({r["codec"] for r in result.records if r.get("codec")}),
            "stashed_before": result.before["stashed_bytes"], "planner_after": result.after["offset_bytes"],
            "planner_before": result.before["offset_bytes"]}


def _is_auto(policy: str) -> bool:
    """A budget-planner policy (written as its own artifact directory): ``auto@SIZE`` or ``auto-growth@SIZE``."""
    return policy.split("@", 1)[0] in ("auto", "auto-growth") and "@" in policy


def run(args: argparse.Namespace) -> dict[str, Any]:
    from onnxcomp.models.artifacts import generate_artifacts
    from onnxcomp.runtime.train import train

    work = Path(args.workdir)
    art = work / f"{args.model}-b{args.batch}-{args.image}px-c10"
    if not (art / "training_model.onnx").exists():
        generate_artifacts(args.model, args.batch, args.image, 10, art)
    transforms: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    # The static-bound ablation runs last, at the median bound the adaptive controller settled on, so
    # both hold activations at a comparable size and only the adaptivity differs.
    order = [*(["baseline"] if not args.no_baseline else []), *[p for p in args.policies if p != "comet-static"],
             *[p for p in args.policies if p == "comet-static"]]
    for label in order:
        model = None
        if label != "baseline":
            eb = None
            if label == "comet-static" and args.static_eb is not None:
                eb = args.static_eb
            elif label == "comet-static" and "comet" in runs:
                finals = [v for r in runs["comet"] for v in (r["bounds"] or {}).get("bounds", {}).values()]
                eb = statistics.median(finals) if finals else None
            model = f"{label}.onnx"
            # A budget plan may split weights (new checkpoint and eval model): it is written as an artifact
            # directory of its own and trained from there.
            out = art / label.replace("@", "_") if _is_auto(label) else art / model
            if args.reuse_transforms and out.exists():   # another process of this run wrote it
                transforms[label] = {"reused": str(out), "eb": eb}
            else:
                transforms[label] = _transform(art, label, out, eb) | {"eb": eb}
        run_dir = art
        if _is_auto(label):
            run_dir, model = art / label.replace("@", "_"), None
        for seed in args.seeds:
            t0 = time.perf_counter()
            res = train(run_dir, model=model, steps=args.steps, data="digits", seed=seed, eval_every=args.eval_every,
                        progress=args.progress, learning_rate=args.lr)
            d = res.to_dict()
            d["wall_s"] = time.perf_counter() - t0
            runs.setdefault(label, []).append(d)
            print(f"{label:14s} seed {seed}: acc {100 * d['accuracy']:.2f}%  loss {d['losses'][-1]:.4f}  "
                  f"{d['step_time_s'] * 1000:.0f} ms/step", flush=True)
    return {"model": args.model, "image": args.image, "batch": args.batch, "steps": args.steps,
            "seeds": args.seeds, "lr": args.lr, "transforms": transforms, "table": _table(runs), "runs": runs}


def _table(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    table = {}
    for label, rs in runs.items():
        accs = [100 * r["accuracy"] for r in rs]
        table[label] = {"mean": statistics.fmean(accs), "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                        "runs": accs, "step_time_s": statistics.median(r["step_time_s"] for r in rs)}
    return table


def write(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    stem = f"accuracy_{result['model']}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, rs in result["runs"].items():
        steps = [s for s, _ in rs[0]["accuracy_history"]]
        curves = [[100 * a for _, a in r["accuracy_history"]] for r in rs]
        mean = [statistics.fmean(c[i] for c in curves) for i in range(len(steps))]
        ax.plot(steps, mean, label=label, lw=1.6 if label == "baseline" else 1.1)
    ax.set_xlabel("training step"), ax.set_ylabel("test accuracy, % (mean over seeds)")
    ax.set_title(f"{result['model']} on digits ({result['image']}×{result['image']}, batch {result['batch']})")
    ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / f"{stem}.png", dpi=120)
    base_runs = result["table"]["baseline"]["runs"] if "baseline" in result["table"] else []
    lines = ["| policy | test accuracy (mean ± std) | Δ vs baseline, paired by seed (mean ± std) | runs | "
             "error-bounded stashes held (raw / encoded) | step time |", "|---|---|---|---|---|---|"]
    for label, t in result["table"].items():
        deltas = [a - b for a, b in zip(t["runs"], base_runs)] or [float("nan")]
        spread = statistics.stdev(deltas) if len(deltas) > 1 else 0.0
        payloads = [r["bounds"]["payload"] for r in result["runs"][label]
                    if (r.get("bounds") or {}).get("payload")]
        held = (f"{statistics.fmean(p['raw_bytes'] for p in payloads) / 2**20:.2f} / "
                f"{statistics.fmean(p['encoded_bytes'] for p in payloads) / 2**20:.2f} MiB "
                f"({statistics.fmean(p['ratio'] for p in payloads):.2f}×)") if payloads else "—"
        lines.append(f"| {label} | {t['mean']:.2f} ± {t['std']:.2f} % | {statistics.fmean(deltas):+.2f} ± "
                     f"{spread:.2f} pp | " + ", ".join(f"{a:.2f}" for a in t["runs"])
                     + f" | {held} | {1000 * t['step_time_s']:.0f} ms |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--policies", nargs="*", default=["dpr-fp16", "dpr-bf16", "dpr-fp10", "dpr-fp8", "comet",
                                                      "comet-static"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--static-eb", type=float, default=None,
                    help="bound of the comet-static ablation (default: the median of the adaptive run's final "
                         "bounds; pick one that matches the adaptive run's compression to compare at equal size)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the baseline runs (run them in another process; combine with --merge)")
    ap.add_argument("--reuse-transforms", action="store_true",
                    help="train a policy's graph already written in the work directory instead of transforming again")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                    help="write the table of these runs' JSON files together (same model, image, batch, steps, "
                         "learning rate)")
    ap.add_argument("--progress", action="store_true",
                    help="show each run's step bar with the latest loss and accuracy (stderr): long runs, e.g. "
                         "VGG-16 at seconds a step, can be watched from their log")
    ap.add_argument("--workdir", default="/tmp/onnxcomp-accuracy")
    ap.add_argument("--out", default="docs/accuracy")
    return ap


def main() -> None:
    args = parser().parse_args()
    write(merge(args.merge) if args.merge else run(args), Path(args.out))


def merge(paths: list[Path]) -> dict[str, Any]:
    """One result from several runs of this script (e.g. baseline and a policy run in two processes)."""
    parts = [json.loads(p.read_text()) for p in paths]
    out = dict(parts[0], transforms={}, runs={})
    seeds: dict[str, list[int]] = {}
    for part in parts:
        # The learning rate too: a model trained at another rate (VGG-16 needs --lr 1e-4 to leave chance on
        # digits) is a different experiment, and its seeds must not pair with these.
        if any(part.get(k) != out.get(k) for k in ("model", "image", "batch", "steps", "lr")):
            raise SystemExit(f"--merge: runs differ in model, image, batch, steps or learning rate: {paths}")
        out["transforms"].update(part["transforms"])
        for label, rs in part["runs"].items():
            out["runs"].setdefault(label, []).extend(rs)
            seeds.setdefault(label, []).extend(part["seeds"])
    if "baseline" not in out["runs"]:
        raise SystemExit("--merge: no baseline runs among the files")
    # Baseline first (the table's deltas and the plot read it as the reference); runs in seed order, so the
    # deltas pair the same seeds.
    out["runs"] = {label: [r for _, r in sorted(zip(seeds[label], rs), key=lambda t: t[0])]
                   for label, rs in {"baseline": out["runs"]["baseline"], **out["runs"]}.items()}
    if len({tuple(sorted(v)) for v in seeds.values()}) > 1:
        raise SystemExit(f"--merge: policies ran different seeds ({seeds}): the deltas would not pair")
    out["seeds"] = sorted(seeds["baseline"])
    out["table"] = _table(out["runs"])
    return out


if __name__ == "__main__":
    main()
