"""Re-predict stored bench_cost_model.py measurements with several cost models; per-graph table + summary.
usage: PYTHONPATH=TREE rp.py TAG=COST.json [TAG=COST.json ...] -- BENCH.json ...
Predictions use this tree's predict_step with each entry's stored baseline profile; measurements untouched."""
import json, os, statistics, sys, warnings
from pathlib import Path

import onnx

warnings.simplefilter("ignore")
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step

i = sys.argv.index("--")
costs = [a.split("=", 1) for a in sys.argv[1:i]]
files = sys.argv[i + 1:]
models = {tag: CostModel.load(path) for tag, path in costs}
rows = []
for f in files:
    d = json.load(open(f))
    for key, e in d["runs"].items():
        art = Path(e["dir"])
        prof = NodeTimes.from_dict(e["profile"])
        base = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
        prof.features, prof.weights = node_features(base), node_weights(base)
        for g, rec in sorted(e["graphs"].items()):
            if "measured_s" not in rec:
                continue
            m = onnx.load(str(art / g), load_external_data=False)
            preds = {tag: predict_step(m, cm, prof) for tag, cm in models.items()}
            rows.append((art.name, e["settings"], g.removesuffix(".onnx"), rec["measured_s"],
                         {t: p.total for t, p in preds.items()}, {t: p.codec_ops for t, p in preds.items()},
                         rec.get("load", [None])[0]))
tags = list(models)
print("| model | settings | graph | measured s | load | " + " | ".join(f"{t}: pred s (codec s), error" for t in tags) + " |")
print("|---|---|---|---:|---:|" + "---:|" * len(tags))
for r in rows:
    cells = [f"{r[4][t]:.3f} ({r[5][t]:.3f}), {r[4][t] / r[3] - 1:+.1%}" for t in tags]
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3f} | {r[6]:.1f} | " + " | ".join(cells) + " |")
print()
for t in tags:
    errs = [abs(r[4][t] / r[3] - 1) for r in rows]
    lossy = [abs(r[4][t] / r[3] - 1) for r in rows if r[2] != "training_model"]
    print(f"{t}: {len(errs)} graphs, within 10 % {sum(e <= 0.10 for e in errs)}/{len(errs)}, median {statistics.median(errs):.1%}, "
          f"mean {statistics.mean(errs):.1%}, worst {max(errs):.1%}; transformed only: {sum(e <= 0.10 for e in lossy)}/{len(lossy)}, "
          f"median {statistics.median(lossy):.1%}")
