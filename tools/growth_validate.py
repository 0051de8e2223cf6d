"""Predicted vs measured ORT-defaults growth over a set of graphs (the growth model's validation table).

    PYTHONPATH=. python tools/growth_validate.py ROOT LIST.json [--out PARTS.json]

LIST.json (docs/auto/lossygrowth/validation.json) lists {"graph": "W/squeezenet_s", "measured": "V/W_squeezenet_s.ortdef.json"}
entries, paths relative to ROOT: each graph directory holds a training_model.onnx, each measured file is
`onnxcomp measure DIR --steps 3 --json --arena --mem-pattern --mem-reuse --order default` output (growth_bytes).
Prints a markdown table (measured, predicted, error, the prediction's parts) and the median |error|.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from onnxcomp.planner import ort_growth

MiB = 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("listing", type=Path)
    ap.add_argument("--out", type=Path, help="write every prediction's parts here (JSON)")
    args = ap.parse_args()
    rows, parts = [], {}
    for entry in json.loads(args.listing.read_text()):
        measured = json.loads((args.root / entry["measured"]).read_text())["growth_bytes"]
        p = ort_growth.predict_growth(args.root / entry["graph"] / "training_model.onnx").to_dict()
        parts[entry["graph"]] = p
        rows.append((entry["graph"], measured, p))
    print("| graph | measured (MiB) | predicted | error | P | copies | arena | nodes | node heap | PyOp heap |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for g, m, p in rows:
        print(f"| {g} | {m / MiB:.2f} | {p['growth_bytes'] / MiB:.2f} | {100 * (p['growth_bytes'] - m) / m:+.1f} % | "
              f"{p['pattern_bytes'] / MiB:.2f} | {p['pattern_copies']} | {p['arena_bytes'] / MiB:.2f} | {p['nodes']} | "
              f"{p['node_bytes'] / MiB:.2f} | {p['heap_bytes'] / MiB:.2f} |")
    err = [abs(p["growth_bytes"] - m) / m for _, m, p in rows]
    print(f"\n{len(rows)} graphs: median |error| {100 * statistics.median(err):.1f} %, within 5 %: "
          f"{sum(e <= 0.05 for e in err)}, within 10 %: {sum(e <= 0.10 for e in err)}, largest {100 * max(err):.1f} %")
    if args.out:
        args.out.write_text(json.dumps(parts, indent=1))


if __name__ == "__main__":
    main()
