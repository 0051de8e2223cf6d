"""Training-step peak vs sequence length for GPT-tiny: baseline vs onnxcomp policies, as a PNG.

    python tools/bench_seqlen.py --seq 128 256 512 1024 2048 --batch 1 --policies lossless dpr-fp8 \\
        --work runs/seqlen -o seqlen.png [--budget 256MiB] [--resume] [--no-baseline]

For each length: `onnxcomp artifacts --model gpt_tiny --seq S` (cached in --work), the policies' graphs,
and one fresh measuring process per graph (onnxcomp measure's settings: arena, mem pattern, mem reuse off,
priority order; 2 steps after a warm-up on the stdlib text). With --budget, also reports the longest
measured length whose peak fits the budget, per graph, and how many times the baseline's that is. Each
policy's losses are compared with the baseline's at the same length (bit for bit: `identical`). Results go
to the PNG and a JSON beside it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from onnxcomp.fileio import atomic_output
from onnxcomp.models.artifacts import generate_artifacts
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.text_data import VOCAB_SIZE
from onnxcomp.transform import transform


def parse_size(text: str) -> int:
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30}
    t = text.strip().lower()
    for u, f in units.items():
        if t.endswith(u):
            return int(float(t[: -len(u)]) * f)
    return int(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--policies", nargs="+", default=["lossless", "dpr-fp8"])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("runs/seqlen"))
    ap.add_argument("--budget", type=parse_size)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--no-baseline", action="store_true", help="measure the policies only (with --resume: "
                    "the baseline's stored figures are kept)")
    ap.add_argument("--resume", action="store_true", help="keep the figures stored in the output's JSON and "
                    "measure only what is missing (runs can be split and ordered by priority)")
    args = ap.parse_args()
    graphs = ([] if args.no_baseline else ["baseline"]) + list(args.policies)
    peaks: dict[str, dict[int, float]] = {g: {} for g in graphs}
    losses: dict[str, dict[int, list[float]]] = {g: {} for g in graphs}
    out_json = args.output.with_suffix(".json")
    if args.resume and out_json.exists():
        stored = json.loads(out_json.read_text())
        if stored.get("batch") != args.batch:
            raise SystemExit(f"{out_json}: batch {stored.get('batch')} stored, --batch {args.batch} asked; "
                             "use another output")
        for g, by_seq in stored["peak_mib"].items():
            peaks.setdefault(g, {}).update({int(k): v for k, v in by_seq.items()})
        for g, by_seq in stored.get("losses", {}).items():
            losses.setdefault(g, {}).update({int(k): v for k, v in by_seq.items()})
    for seq in args.seq:
        art = args.work / f"gpt_tiny-b{args.batch}-t{seq}"
        if not (art / "training_model.onnx").exists():
            generate_artifacts("gpt_tiny", args.batch, 1, VOCAB_SIZE, art, seq_len=seq, smoke_test=False,
                               overwrite=True)
        for g in graphs:
            if seq in peaks[g]:
                continue
            model = "training_model.onnx" if g == "baseline" else f"{g}.onnx"
            if g != "baseline" and not (art / model).exists():
                transform(art, art / model, g)
            r = measure(art, model=model, steps=args.steps, data="text")
            peaks[g][seq], losses[g][seq] = r.peak_bytes / 2**20, list(r.losses)
            print(f"T={seq:5d} {g:12s} {peaks[g][seq]:8.1f} MiB  step {r.step_time_s:.2f} s", flush=True)
            _write_json(out_json, _summary(args, peaks, losses))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    graphs = list(peaks)
    for g in graphs:
        xs = sorted(peaks[g])
        ax.plot(xs, [peaks[g][x] for x in xs], marker="o", label=g)
    summary = _summary(args, peaks, losses)
    _write_json(out_json, summary)
    if args.budget:
        ax.axhline(args.budget / 2**20, color="grey", linestyle="--", label=f"budget {args.budget / 2**20:.0f} MiB")
        print("longest sequence within the budget:", summary["longest_within_budget"],
              "× the baseline's:", summary["length_vs_baseline"])
    print("losses equal to the baseline's:", summary["identical"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("training-step peak (MiB)")
    ax.set_title(f"GPT-tiny, batch {args.batch}: peak vs sequence length")
    ax.legend()
    fig.tight_layout()
    with atomic_output(args.output) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    print(f"wrote {args.output} and {out_json}")


def _write_json(path: Path, data: dict) -> None:
    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(data, indent=2))


def _summary(args: argparse.Namespace, peaks: dict[str, dict[int, float]],
             losses: dict[str, dict[int, list[float]]]) -> dict:
    """The JSON beside the PNG: peaks, losses, which policies' losses equal the baseline's, and (with a
    budget) the longest length within it per graph and its ratio to the baseline's."""
    base = losses.get("baseline", {})
    out = {"batch": args.batch, "steps": args.steps, "peak_mib": peaks, "losses": losses,
           "identical": {g: {s: by_seq[s] == base[s] for s in by_seq if s in base}
                         for g, by_seq in losses.items() if g != "baseline"}}
    if args.budget:
        fits = {g: max((s for s, p in by_seq.items() if p * 2**20 <= args.budget), default=None)
                for g, by_seq in peaks.items()}
        b = fits.get("baseline")
        out |= {"budget_bytes": args.budget, "longest_within_budget": fits,
                "length_vs_baseline": {g: (f / b if f and b else None) for g, f in fits.items()}}
    return out


if __name__ == "__main__":
    main()
