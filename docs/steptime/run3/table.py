"""Print the run3 bench JSONs as one markdown table: per run and configuration, wall and CPU ratio (min-over-min
/ median of per-round ratios), baseline step, kernel CPU and minor faults per step (medians), load at the end."""
import json, sys
from pathlib import Path
here = Path(__file__).parent
print("| run | threads | alloc | load (1/5/15 at end) | config | wall ratio min / med | CPU ratio min / med "
      "| step CPU min / med | kernel CPU | minor faults |")
print("|---|---|---|---|---|---:|---:|---:|---:|---:|")
for f in sorted(here.glob("*.json")) if len(sys.argv) < 2 else [Path(a) for a in sys.argv[1:]]:
    d = json.loads(f.read_text())
    if "rows" not in d:
        continue
    load = "/".join(f"{x:.1f}" for x in d["load_avg"])
    alloc = "pinned" if d["malloc_mmap_threshold"] != "glibc default" else "glibc"
    for r in d["rows"]:
        print(f"| {f.stem} | {d['intra_threads'] or 'ORT default'} | {alloc} | {load} | {r['config']} "
              f"| {r['wall_min_ratio']:.2f} / {r['wall_ratio']:.2f} | {r['cpu_min_ratio']:.2f} / {r['cpu_ratio']:.2f} "
              f"| {r['cpu_min_s']:.3f} / {r['cpu_median_s']:.3f} s | {r['kernel_median_s']:.3f} s "
              f"| {r['minor_faults_median']:.0f} |")
