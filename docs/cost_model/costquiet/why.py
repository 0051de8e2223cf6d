import json, sys, onnx, warnings, collections
warnings.simplefilter("ignore")
from onnxcomp.planner.cost_model import CostModel, NodeTimes, predict_step, op_kind, _tensor_shapes
f, graph = sys.argv[1], sys.argv[2]
d = json.load(open(f))
for k, e in d["runs"].items():
    nt = NodeTimes.from_dict(e["profile"])
    m = onnx.load(f"{e['dir']}/{graph}", load_external_data=False)
    _, _, dtypes = _tensor_shapes(m)
    meas = e["graphs"][graph]["measured_s"]
    for tag, path in (("nomix", "/tmp/costquiet/cal_nomix.json"), ("new", None), ("main", "/work/main/onnxcomp/planner/cost_model_defaults.json")):
        cost = CostModel.load(path)
        p = predict_step(m, cost, nt)
        by = collections.Counter()
        for n in m.graph.node:
            key = n.name
            if key in p.per_node and not (n.name in nt):
                by[op_kind(n, dtypes) if n.op_type == "Cast" else ("codec" if n.domain.startswith("ai.onnx.contrib") else n.op_type)] += p.per_node[key]
        print(k, tag, f"slowdown {nt.slowdown(cost):.2f} total {p.total:.3f} meas {meas:.3f}", {a: round(b*1e3, 1) for a, b in by.most_common(6)})
