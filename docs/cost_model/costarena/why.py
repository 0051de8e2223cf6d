import json, sys, collections, warnings
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
res = json.load(open(sys.argv[1])); art = Path(sys.argv[2]); g = sys.argv[3]
with warnings.catch_warnings():
    warnings.simplefilter("ignore"); cost = CostModel.load(sys.argv[4] if len(sys.argv) > 4 else None)
base = NodeTimes.from_dict(res["base"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
base.features, base.weights = node_features(bg), node_weights(bg)
model = onnx.load(str(art / g), load_external_data=False)
pred = predict_step(model, cost, base)
meas = NodeTimes.from_dict(res[g])
print("slowdown", base.slowdown(cost), "dispatch", base.dispatch_seconds(), "base step", base.step_seconds, "graph step", meas.step_seconds, "pred", pred.total)
local = base.local_op_fits()
feats = node_features(model)
cat = collections.defaultdict(lambda: [0.0, 0.0, 0, 0.0])
for n in model.graph.node:
    k = n.name
    if k in base and feats[k][0] == base.features[k][0]: 
        c = cat[("same", "")]; c[0] += pred.per_node.get(k, 0); c[1] += meas.get(k, 0); c[2] += 1; continue
    kind = feats[k][0]
    path = "codec" if k in pred.codec_nodes else ("local" if kind in local else ("cal:" + (kind if kind in cost.ops else n.op_type if n.op_type in cost.ops else "*")))
    c = cat[(kind, path)]; c[0] += pred.per_node.get(k, 0); c[1] += meas.get(k, 0); c[2] += 1; c[3] += feats[k][1]
for (kind, path), (pr, me, n, b) in sorted(cat.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0])):
    print(f"{kind:28s} {path:28s} {n:4d} pred {pr*1e3:8.1f} meas {me*1e3:8.1f} ratio {me/pr if pr else 0:5.2f}  MiB {b/2**20:7.1f} meas ns/B {me/b*1e9 if b else 0:.3f}")
