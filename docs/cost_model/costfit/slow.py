import json, sys, collections, warnings
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, op_features, VIEW_OPS
with warnings.catch_warnings():
    warnings.simplefilter("ignore"); cost = CostModel.load(None)
res = json.load(open(sys.argv[1]))
base = NodeTimes.from_dict(res[sys.argv[2] if len(sys.argv) > 2 else "base"])
agg = collections.defaultdict(lambda: [0.0, 0.0, 0, 0.0])
for name, (op, nb, macs, *_) in base.features.items():
    fit = cost.ops.get(op)
    if fit is None or macs or nb < (1 << 20) or op in VIEW_OPS or base.get(name, 0) <= 0: continue
    a = agg[op]; a[0] += base[name]; a[1] += fit.predict(op_features(nb, 0)); a[2] += 1; a[3] += nb
for op, (m, f, n, b) in agg.items():
    print(f"{op:24s} n {n:3d} meas {m*1e3:7.2f} fit {f*1e3:7.2f} ratio {m/f:.2f} meas ns/B {m/b*1e9:.3f}")
print("slowdown", base.slowdown(cost))
for k in ["Mul", "Add", "Slice", "Cast", "Clip", "Relu", "*"]:
    if k in cost.ops: print(k, cost.ops[k].coef)
