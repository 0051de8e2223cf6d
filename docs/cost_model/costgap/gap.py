"""Per op class: predicted (from the baseline profile) vs profiled time in the graph's own profile.
usage: gap.py PROFILES.json [COST.json|-] [graph...]"""
import json, sys, collections, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import (CostModel, NodeTimes, node_features, node_weights, predict_step, op_kind,
                                         _tensor_shapes)
from onnxcomp.custom_ops.contract import codec_op
d = json.load(open(sys.argv[1])); cost_p = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
art = Path(d["art"]); cost = CostModel.load(cost_p)
base = NodeTimes.from_dict(d["profiles"]["training_model.onnx"][0]["nt"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
base.features, base.weights = node_features(bg), node_weights(bg)
graphs = sys.argv[3:] or [g for g in d["profiles"] if g != "training_model.onnx"]
print(f"{art.name} {d['settings']} slowdown {base.slowdown(cost):.3f} base step {base.step_seconds:.3f} nodes {sum(base.values()):.3f} ovh {base.overhead_seconds:.3f}")
for g in graphs:
    for rec in d["profiles"][g]:
        prof = NodeTimes.from_dict(rec["nt"])
        m = onnx.load(str(art / g), load_external_data=False)
        _, _, dtypes = _tensor_shapes(m)
        pred = predict_step(m, cost, base)
        acc = collections.defaultdict(lambda: [0.0, 0.0, 0])
        for i, n in enumerate(m.graph.node):
            key = n.name or f"{n.op_type}#{i}"
            op = codec_op(n.domain, n.op_type)
            kind = op_kind(n, dtypes)
            if op is not None:
                cls = f"codec {op.codec} {op.role}"
            elif key in base and (base.features.get(key) or (kind,))[0] == kind:
                cls = "kept"
            else:
                cls = f"new {kind}"
            a = acc[cls]; a[0] += pred.per_node.get(key, 0.0); a[1] += prof.get(key, 0.0); a[2] += 1
        acc["overhead"] = [pred.overhead, prof.overhead_seconds, 1]
        tot_p = pred.total; tot_m = prof.step_seconds
        print(f"  {g}: predicted {tot_p:.3f} profiled step {tot_m:.3f} ({tot_p/tot_m-1:+.1%}) load {rec['load']}")
        for cls, (p, t, c) in sorted(acc.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1])):
            if abs(p - t) < 0.002 and p < 0.01: continue
            print(f"     {cls:34s} n={c:4d} pred {p*1e3:8.1f} ms prof {t*1e3:8.1f} ms diff {(p-t)*1e3:+7.1f} ms ({(p-t)/tot_m:+.1%} of step) ratio {p/max(t,1e-9):.2f}")
