import json, sys, collections, warnings
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
res = json.load(open(sys.argv[1])); art = Path(sys.argv[2]); g = sys.argv[3]
costp = (sys.argv[4] or None) if len(sys.argv) > 4 else None
with warnings.catch_warnings():
    warnings.simplefilter("ignore"); cost = CostModel.load(costp)
base = NodeTimes.from_dict(res["base"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
base.features, base.weights = node_features(bg), node_weights(bg)
model = onnx.load(str(art / g), load_external_data=False)
pred = predict_step(model, cost, base)
meas = NodeTimes.from_dict(res[g])
print(f"baseline step {base.step_seconds:.3f} nodes {sum(base.values()):.3f} ovh {base.overhead_seconds:.3f}")
print(f"{g}: step {meas.step_seconds:.3f} nodes {sum(meas.values()):.3f} ovh {meas.overhead_seconds:.3f}; predicted total {pred.total:.3f} ort {pred.ort_ops:.3f} codec {pred.codec_ops:.3f} ovh {pred.overhead:.3f}")
feats = node_features(model)
# category: profiled-name (in base), clone, new
cat = collections.defaultdict(lambda: [0.0, 0.0, 0])
rows = []
for n in model.graph.node:
    k = n.name
    pr = pred.per_node.get(k, 0.0); me = meas.get(k, 0.0)
    kind = "same" if k in base else ("codec" if k in pred.codec_nodes else "new")
    c = cat[(kind, n.op_type)]; c[0] += pr; c[1] += me; c[2] += 1
    rows.append((me - pr, k, n.op_type, kind, pr, me, feats.get(k, (0, 0, 0))[1], feats.get(k, (0, 0, 0))[2]))
print("\nby (kind, op): n, predicted ms, measured ms, diff")
for (kind, op), (pr, me, n) in sorted(cat.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0])):
    if abs(me - pr) > 0.002 or kind != "same":
        print(f"  {kind:6s} {op:28s} {n:4d} {pr*1e3:9.1f} {me*1e3:9.1f} {(me-pr)*1e3:+9.1f}")
print("\nworst nodes:")
for d, k, op, kind, pr, me, b, macs in sorted(rows, key=lambda r: -abs(r[0]))[:int(sys.argv[5]) if len(sys.argv) > 5 else 25]:
    print(f"  {k[:70]:70s} {op:18s} {kind:5s} pred {pr*1e3:7.2f} meas {me*1e3:7.2f} bytes {b/2**20:7.2f}M macs {macs/1e6:8.1f}M")
