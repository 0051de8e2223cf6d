"""Growth ratios with and without the set-up a plan adds, from `onnxcomp measure --json` files (ORT defaults).

`measure` reports ``growth_bytes`` (the highest RSS over the steps less the RSS after set-up) and
``rss_setup_bytes`` (the RSS after set-up). The growth figure alone leaves out what a transform adds before step 0
(spacer parameters with their gradient buffers and Adam moments, ORT's set-up per added node), which the process
holds as surely as its growth. So, per net, from a baseline run and a plan run (one fresh process each):

    growth ratio      = baseline growth / plan growth
    set-up added      = plan rss_setup - baseline rss_setup            (signed: a plan may set up smaller)
    set-up counted    = baseline growth / (plan growth + set-up added)

i.e. what the process holds beyond the untouched graph's set-up, plan against baseline.

    python tools/setup_counted.py DIR NET... [--plan-suffix _exact.ortdef.json] [--base-suffix .base.ortdef.json]
        [--json out.json]

reads DIR/NET<base-suffix> and DIR/NET<plan-suffix>; prints a Markdown table and both medians.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

MiB = 1 << 20


def row(base: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The figures of one net from its baseline's and its plan's `measure --json`."""
    added = int(plan["rss_setup_bytes"]) - int(base["rss_setup_bytes"])
    g_base, g_plan = int(base["growth_bytes"]), int(plan["growth_bytes"])
    return {"baseline_growth_bytes": g_base, "plan_growth_bytes": g_plan,
            "baseline_setup_bytes": int(base["rss_setup_bytes"]), "plan_setup_bytes": int(plan["rss_setup_bytes"]),
            "setup_added_bytes": added, "growth_ratio": g_base / g_plan,
            "setup_counted_ratio": g_base / (g_plan + added),
            "losses_equal": base.get("losses") == plan.get("losses")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("nets", nargs="+")
    p.add_argument("--plan-suffix", default="_exact.ortdef.json")
    p.add_argument("--base-suffix", default=".base.ortdef.json")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    rows: dict[str, dict[str, Any]] = {}
    for n in a.nets:
        try:
            base = json.loads((a.dir / f"{n}{a.base_suffix}").read_text())
            plan = json.loads((a.dir / f"{n}{a.plan_suffix}").read_text())
        except (OSError, ValueError) as exc:
            print(f"setup_counted: {n}: {exc}", file=sys.stderr)
            continue
        rows[n] = row(base, plan)
    if not rows:
        print("setup_counted: error: no net had both files", file=sys.stderr)
        return 2
    print("| net | baseline growth | plan growth | set-up added | growth ratio | set-up counted | losses = baseline |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for n, r in rows.items():
        print(f"| {n} | {r['baseline_growth_bytes'] / MiB:.2f} | {r['plan_growth_bytes'] / MiB:.2f} | "
              f"{r['setup_added_bytes'] / MiB:+.2f} | {r['growth_ratio']:.2f}× | {r['setup_counted_ratio']:.2f}× | "
              f"{'yes' if r['losses_equal'] else 'NO'} |")
    med_g = statistics.median(r["growth_ratio"] for r in rows.values())
    med_t = statistics.median(r["setup_counted_ratio"] for r in rows.values())
    print(f"\nmedian over {len(rows)} nets: growth ratio {med_g:.2f}×, set-up counted {med_t:.2f}×")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "median_growth_ratio": med_g,
                                      "median_setup_counted_ratio": med_t}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
