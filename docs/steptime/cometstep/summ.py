"""Summarise bench_steps JSONs: per config, CPU and wall ratios to the baseline (min-over-min, median and
quartiles of the per-round ratios), step medians, faults. usage: summ.py FILE..."""
import json
import sys

import numpy as np

for f in sys.argv[1:]:
    r = json.load(open(f))
    rows = r["rows"]
    base = rows[0]
    print(f"{f}: steps {r['steps']} warmup {r['warmup']} threads {r['intra_threads']} alloc {r['malloc_mmap_threshold']} "
          f"load at end {tuple(round(x, 2) for x in r['load_avg'])}")
    for row in rows:
        out = []
        for kind in ("cpu", "wall"):
            a, b = np.array(row[f"{kind}_s"]), np.array(base[f"{kind}_s"])
            q = np.percentile(a / b, [25, 50, 75])
            out.append(f"{kind} min/min {a.min() / b.min():.3f} per-round q25/med/q75 {q[0]:.3f}/{q[1]:.3f}/{q[2]:.3f} "
                       f"(step med {np.median(a):.3f} s)")
        print(f"  {row['config']:12s} " + " | ".join(out) + f" | faults med {row['minor_faults_median']:.0f}")
