"""The quiet MobileNetV2 ORT-defaults hold (q_mnv2_ort.json): per-codec in-step gap, and whole steps predicted vs measured
(zero term, the derived term, per-codec scale + term)."""
import json, sys, collections, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import numpy as np, onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
D = Path(__file__).parent
d = json.load(open(D / "q_mnv2_ort.json")); art = Path(d["art"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
base = NodeTimes.from_dict(d["profiles"]["training_model.onnx"][0]["nt"]); base.features, base.weights = node_features(bg), node_weights(bg)
variants = {v: CostModel.load(f"/tmp/costcall/cost_{v}.json") for v in sys.argv[1:]}
for g in d["profiles"]:
    m = onnx.load(str(art / g), load_external_data=False)
    prof = NodeTimes.from_dict(d["profiles"][g][0]["nt"]); meas = d["measures"][g][0]["step_s"]
    out = [f"{g:20s} profiled {prof.step_seconds:.3f} measured {meas:.3f}"]
    for v, cost in variants.items():
        p = predict_step(m, cost, base)
        out.append(f"{v} {p.total:.3f} ({p.total/meas-1:+.1%})")
        if v == "zero":
            gap = collections.defaultdict(lambda: [0, 0.0, 0.0, []])
            for n, (c, role, size, nz) in p.codec_nodes.items():
                x = gap[(c, role)]; x[0] += 1; x[1] += p.per_node[n]; x[2] += prof.get(n, 0.0)
                if size <= 1 << 20: x[3].append(prof.get(n, 0.0) - p.per_node[n])
    print("  ".join(out))
    for (c, role), (n, pp, t, sm) in sorted(gap.items()):
        print(f"    {c}/{role}: n {n} pred {pp*1e3:.1f} ms profiled {t*1e3:.1f} ms ratio {t/max(pp,1e-9):.2f}; ops <= 1 MiB median gap {np.median(sm)*1e3 if sm else float('nan'):.3f} ms")
