"""Second quiet hold (q2_mnv2_ort.json: baseline interleaved 4x with lossless, dpr-fp8, comet; profiles only). Predict
each transformed graph's profiled step from the baseline profile taken just before it, per variant of the term."""
import json, sys, collections, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import numpy as np, onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
D = Path(__file__).parent
d = json.load(open(D / "q2_mnv2_ort.json")); art = Path(d["art"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False); feats = (node_features(bg), node_weights(bg))
variants = {v: CostModel.load(f"/tmp/costcall/cost_{v}.json") for v in sys.argv[1:]}
bases = d["profiles"]["training_model.onnx"]
print("baseline steps in hold order:", [round(b["nt"]["step_seconds"], 3) for b in bases])
order = sorted([(p["at"], g, p) for g, l in d["profiles"].items() for p in l], key=lambda x: x[0])
prev = None
for at, g, p in order:
    if g == "training_model.onnx": prev = p; continue
    base = NodeTimes.from_dict(prev["nt"]); base.features, base.weights = feats
    m = onnx.load(str(art / g), load_external_data=False); prof = NodeTimes.from_dict(p["nt"])
    out = [f"{g:15s} (baseline before it {base.step_seconds:.3f}) profiled {prof.step_seconds:.3f}"]
    for v, cost in variants.items():
        pr = predict_step(m, cost, base); out.append(f"{v} {pr.total:.3f} ({pr.total/prof.step_seconds-1:+.1%})")
    kept = [n for n in base if n in prof]
    out.append(f"| kept nodes {sum(base[n] for n in kept):.3f} -> {sum(prof[n] for n in kept):.3f} s")
    print("  ".join(out))
