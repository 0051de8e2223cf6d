"""Paired Δ (plan − baseline) per seed at each evaluation step, from accuracy_experiment JSONs."""
import json, statistics as st, sys
base = {}
plan = {}
for f in sys.argv[1:]:
    d = json.load(open(f))
    for label, rs in d["runs"].items():
        for seed, r in zip(d["seeds"], rs):
            (base if label == "baseline" else plan)[seed] = r
seeds = sorted(set(base) & set(plan))
print("seeds", seeds)
steps = [s for s, _ in base[seeds[0]]["accuracy_history"]]
for i, s in enumerate(steps):
    b = [100 * base[k]["accuracy_history"][i][1] for k in seeds]
    p = [100 * plan[k]["accuracy_history"][i][1] for k in seeds]
    d = [x - y for x, y in zip(p, b)]
    print(f"step {s}: base {st.fmean(b):.2f} ± {st.stdev(b):.2f}  plan {st.fmean(p):.2f} ± {st.stdev(p):.2f}  "
          f"Δ {st.fmean(d):+.2f} ± {st.stdev(d):.2f} (median {st.median(d):+.2f})  per seed {[round(x, 2) for x in d]}")
