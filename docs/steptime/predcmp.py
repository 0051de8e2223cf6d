import json, sys, collections, onnx
sys.path.insert(0, "/work/wt-steptime")
from onnxcomp.planner.cost_model import CostModel, NodeTimes, predict_step
cost = CostModel.load(sys.argv[3] if len(sys.argv) > 3 else None)
base = NodeTimes.from_dict(json.load(open(sys.argv[1])))
meas = NodeTimes.from_dict(json.load(open(sys.argv[2])))
g = sys.argv[2].split("-", 1)[1].replace(".json", "")
m = onnx.load(f"/tmp/steptime/resnet18/{g}", load_external_data=False)
p = predict_step(m, cost, base)
print("pred total", round(p.total, 3), "meas step", round(meas.step_seconds, 3), "ort", round(p.ort_ops, 3), "codec", round(p.codec_ops, 3))
cat = collections.defaultdict(lambda: [0, 0.0, 0.0])
ops = {n.name: n.op_type for n in m.graph.node}
for n, t in p.per_node.items():
    if n in base: continue
    op = ops.get(n, "?"); b = meas.features.get(n, (op, 0, 0))[1]
    key = (op, "big" if b > 1 << 20 else "small")
    cat[key][0] += 1; cat[key][1] += t; cat[key][2] += meas.get(n, 0.0)
print("new nodes: op, size | count | predicted ms | measured ms")
for k, v in sorted(cat.items(), key=lambda kv: -max(kv[1][1], kv[1][2]))[:22]:
    print(f"  {k[0]:26s} {k[1]:5s} {v[0]:4d} {v[1]*1e3:9.1f} {v[2]*1e3:9.1f}")
kept_pred = sum(t for n, t in p.per_node.items() if n in base); kept_meas = sum(meas.get(n, 0) for n in base)
print("kept nodes predicted", round(kept_pred, 3), "measured in transformed graph", round(kept_meas, 3))
