"""Training-step peak of transformer graphs, baseline vs onnxcomp policies, under two ORT settings.

    python tools/bench_transformers.py DIR --data text --policies lossless dpr-fp16 dpr-fp8 -o out.json

DIR is an artifact directory (`onnxcomp artifacts --model gpt_tiny|vit_tiny ...`); each policy's graph is
made with `onnxcomp transform DIR -o DIR/POLICY.onnx --policy POLICY` if missing. Every configuration runs
in a fresh process (onnxcomp.runtime.measure). Settings: "today" = onnxcomp measure's defaults (arena,
mem pattern and mem reuse off, priority order; figure: per-step peak), "ort-defaults" = ORT's own
defaults (arena, mem pattern, mem reuse on, DEFAULT order; figure: growth over the post-setup RSS, since
the arena keeps the previous step's memory). Prints a Markdown table; exact policies' losses are compared
bit for bit with the baseline's.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.transform import transform

SETTINGS = {
    "today": (RuntimeSettings(), "peak_bytes"),
    "ort-defaults": (RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default"),
                     "growth_bytes"),
}
EXACT = ("lossless", "lossless-encode", "recompute", "reorder")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--data", default="synthetic")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--policies", nargs="+", default=["lossless", "dpr-fp16", "dpr-fp8"])
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args()
    for policy in args.policies:
        if not (args.dir / f"{policy}.onnx").exists():
            transform(args.dir, args.dir / f"{policy}.onnx", policy)
    rows = []
    for setting in args.settings:
        rs, figure = SETTINGS[setting]
        base = None
        for policy in ["baseline", *args.policies]:
            model = "training_model.onnx" if policy == "baseline" else f"{policy}.onnx"
            r = measure(args.dir, model=model, steps=args.steps, settings=rs, data=args.data)
            row = {"setting": setting, "policy": policy, "figure": figure, "bytes": getattr(r, figure),
                   "peak_bytes": r.peak_bytes, "growth_bytes": r.growth_bytes, "step_time_s": r.step_time_s,
                   "losses": r.losses}
            if base is None:
                base = row
            row["ratio"] = base["bytes"] / row["bytes"]
            row["time_ratio"] = row["step_time_s"] / base["step_time_s"]
            row["bit_identical"] = row["losses"] == base["losses"]
            rows.append(row)
            print(f"{setting:13s} {policy:16s} {row['bytes'] / 2**20:8.1f} MiB  {row['ratio']:.2f}x  "
                  f"time {row['time_ratio']:.2f}x  identical={row['bit_identical']}", flush=True)
            args.output.write_text(json.dumps(rows, indent=2))
    print("\n| ORT settings | policy | MiB | ratio | step time | losses |\n|---|---|---:|---:|---:|---|")
    for r in rows:
        exact = "bit-identical" if r["bit_identical"] else ("DIFFER" if r["policy"] in EXACT else "lossy")
        print(f"| {r['setting']} | {r['policy']} | {r['bytes'] / 2**20:.1f} | {r['ratio']:.2f}× | "
              f"{r['time_ratio']:.2f}× | {exact if r['policy'] != 'baseline' else ''} |")


if __name__ == "__main__":
    main()
