# Scratch tool kept for the record (docs/notes/growthplan.md): run from a directory holding W/, X/, L/, M/ as there.
"""Predicted vs measured ORT-defaults growth on the suite graphs: W (baseline), X (auto --exact), L (auto lossy),
plus any G/* dirs measured. Prints a markdown table; raw parts cached in V/parts.json."""
import json, sys, os
from pathlib import Path
import numpy as np
from onnxcomp.planner import ort_growth
MiB = 2**20
nets = ["squeezenet_s", "mobilenet_v1_s", "plain_deep", "wide_resnet_s", "densenet_s", "leaky_vgg"]
dirs = [f"W/{n}" for n in nets] + [f"X/{n}" for n in nets] + [f"L/{n}" for n in nets] + sys.argv[1:]
Path("V").mkdir(exist_ok=True)
cache = json.loads(Path("V/parts.json").read_text()) if Path("V/parts.json").exists() else {}
rows = []
for d in dirs:
    tag = d.replace("/", "_")
    if d.startswith("W/"):
        meas = json.load(open(f"W/{d[2:]}.baseline.ort-default.json"))["growth_bytes"]
    else:
        f = Path(f"M/{tag}.ortdef.json")
        if not f.exists():
            continue
        meas = json.load(open(f))["growth_bytes"]
    if d not in cache or os.environ.get("REDO"):
        g = ort_growth.predict_growth(f"{d}/training_model.onnx")
        cache[d] = g.to_dict()
        Path("V/parts.json").write_text(json.dumps(cache, indent=1))
    p = cache[d]
    rows.append((d, meas, p))
for d, meas, p in rows:
    pred = p["growth_bytes"]
    print(f"| {d} | {meas/MiB:.2f} | {pred/MiB:.2f} | {100*(pred-meas)/meas:+.1f} % | {p['pattern_bytes']/MiB:.2f} | {p['pattern_copies']} | {p['arena_bytes']/MiB:.2f} | {p['node_bytes']/MiB:.2f} | {p['heap_bytes']/MiB:.2f} |")
err = [abs(p["growth_bytes"] - m) / m for _, m, p in rows]
print("n", len(rows), "median |err| %.1f %%" % (100*np.median(err)), "within 5%:", sum(e <= 0.05 for e in err), "within 10%:", sum(e <= 0.10 for e in err))
