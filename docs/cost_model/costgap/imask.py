"""Per intervalmask / bitmask op: nbytes, predicted (calibration, size scale) vs profiled, sorted by size."""
import json, sys, warnings, collections
warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, predict_step
d = json.load(open(sys.argv[1])); art = Path(d["art"]); g = sys.argv[2]; codec = sys.argv[3]
cost = CostModel.load(None)
base = NodeTimes.from_dict(d["profiles"]["training_model.onnx"][0]["nt"])
base.features = node_features(onnx.load(str(art / "training_model.onnx"), load_external_data=False))
prof = NodeTimes.from_dict(d["profiles"][g][0]["nt"])
m = onnx.load(str(art / g), load_external_data=False)
pred = predict_step(m, cost, base)
arena = bool(base.settings.get("arena"))
rows = []
for n, (c, role, size, nz) in pred.codec_nodes.items():
    if c != codec: continue
    fits = (cost.codecs_arena.get(c) if arena else None) or cost.codecs[c]
    rows.append((role, size, pred.per_node[n], prof.get(n, 0.0), fits[role].size_factor(size)))
for role in ("encode", "decode"):
    b = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r, size, p, t, sf in rows:
        if r != role: continue
        k = 1 << max(0, (size - 1).bit_length() - 1)
        x = b[k]; x[0] += 1; x[1] += p; x[2] += t; x[3] = sf
    for k in sorted(b):
        n, p, t, sf = b[k]
        print(f"{role} ~{k/2**20:6.3f} MiB n={n:2d} pred {p*1e3:7.2f} ms prof {t*1e3:7.2f} ms ratio {p/max(t,1e-9):.2f} size_factor {sf:.2f}")
