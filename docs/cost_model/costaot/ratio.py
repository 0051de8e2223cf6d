"""Predicted vs measured slowdown over the baseline, from an interleaved bench_steps run (one process, steps
rotated) and the baseline profile stored in a bench_cost_model.py JSON (same model and settings).
usage: PYTHONPATH=TREE ratio.py BENCH.json STEPS.json TAG=COST.json ..."""
import json, statistics, sys, warnings
from pathlib import Path

import onnx

warnings.simplefilter("ignore")
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step

bench, steps, costs = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
src = json.load(open(bench))
if "runs" in src:  # bench_cost_model.py JSON
    e = next(iter(src["runs"].values()))
    art, nt, settings = Path(e["dir"]), e["profile"], e["settings"]
else:  # prof.py JSON: its last baseline profile
    art, nt, settings = Path(src["art"]), src["profiles"]["training_model.onnx"][-1]["nt"], src["settings"]
e = {"settings": settings}
prof = NodeTimes.from_dict(nt)
base = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
prof.features, prof.weights = node_features(base), node_weights(base)
res = json.load(open(steps))
rows = {r["config"]: r for r in res["rows"]}
graph = {"baseline": "training_model.onnx"}
models = {t: CostModel.load(p) for t, p in costs}
pred = {}
for label in rows:
    g = graph.get(label, f"{label}.onnx")
    m = onnx.load(str(art / g), load_external_data=False)
    pred[label] = {t: predict_step(m, cm, prof).total for t, cm in models.items()}
print(f"{art.name} {e['settings']}: interleaved, {res['steps']} steps, load {res['load_avg'][0]:.2f}")
print("| graph | wall median s (min) | CPU median s | measured wall ratio: median of rounds (of min steps) | CPU ratio | " +
      " | ".join(f"{t}: predicted ratio, error vs median (vs min)" for t in models) + " |")
print("|---|---:|---:|---:|---:|" + "---:|" * len(models))
errs_min = {t: [] for t in models}
errs = {t: [] for t in models}
for label, r in rows.items():
    cells = []
    for t in models:
        pr = pred[label][t] / pred["baseline"][t]
        err = pr / r["wall_ratio"] - 1
        err_min = pr / r["wall_min_ratio"] - 1
        if label != "baseline":
            errs[t].append(abs(err))
            errs_min[t].append(abs(err_min))
        cells.append(f"{pr:.3f}, {err:+.1%} ({err_min:+.1%})")
    print(f"| {label} | {r['wall_median_s']:.3f} ({r['wall_min_s']:.3f}) | {r['cpu_median_s']:.3f} | {r['wall_ratio']:.3f} ({r['wall_min_ratio']:.3f}) | {r['cpu_ratio']:.3f} | "
          + " | ".join(cells) + " |")
print(f"baseline profile step {prof.step_seconds:.3f} s (predicted baseline); interleaved baseline wall median "
      f"{rows['baseline']['wall_median_s']:.3f} s")
for t in models:
    ab = [abs(pred[l][t] / rows[l]["wall_median_s"] - 1) for l in rows]
    print(f"{t}: absolute (predicted / interleaved wall median) within 10 % {sum(x <= 0.10 for x in ab)}/{len(ab)}, "
          f"median {statistics.median(ab):.1%}, worst {max(ab):.1%}")
for t, l in errs.items():
    m = errs_min[t]
    print(f"{t}: slowdown within 10 % {sum(x <= 0.10 for x in l)}/{len(l)}, median |error| {statistics.median(l):.1%}, worst {max(l):.1%}"
          f"; vs min-step ratio {sum(x <= 0.10 for x in m)}/{len(m)}, median {statistics.median(m):.1%}, worst {max(m):.1%}")
