"""Model error per op class given a perfect baseline: the baseline profile's node times replaced by the same
nodes' times in the graph's own profile (kept nodes), so process drift drops out; then new ops / codecs
predicted (calibration x slowdown) vs profiled.  usage: gap2.py PROFILES.json COST|- [graph...]"""
import json, sys, collections, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import (CostModel, NodeTimes, node_features, node_weights, predict_step, op_kind,
                                         _tensor_shapes)
from onnxcomp.custom_ops.contract import codec_op
d = json.load(open(sys.argv[1])); cost_p = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
art = Path(d["art"]); cost = CostModel.load(cost_p)
bases = d["profiles"]["training_model.onnx"]
base0 = NodeTimes.from_dict(bases[0]["nt"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
feats, weights = node_features(bg), node_weights(bg)
graphs = sys.argv[3:] or [g for g in d["profiles"] if g != "training_model.onnx"]
tot = collections.defaultdict(lambda: [0.0, 0.0])
for g in graphs:
    for rec in d["profiles"][g]:
        prof = NodeTimes.from_dict(rec["nt"])
        m = onnx.load(str(art / g), load_external_data=False)
        _, _, dtypes = _tensor_shapes(m)
        kept = {n: prof[n] for n in base0 if n in prof and feats.get(n) and (m and True)}
        # nodes of the base graph the transformed graph kept with the same op
        gk = {n.name: op_kind(n, dtypes) for n in m.graph.node}
        kept = {n: prof[n] for n in base0 if n in prof and gk.get(n) == feats[n][0]}
        missing = {n: base0[n] for n in base0 if n not in kept}   # removed / rewritten nodes: base profile's
        synth = NodeTimes({**missing, **kept}, features=feats, step_seconds=base0.step_seconds,
                          overhead_seconds=base0.overhead_seconds, settings=base0.settings, weights=weights)
        pred = predict_step(m, cost, synth)
        acc = collections.defaultdict(lambda: [0.0, 0.0, 0])
        for i, n in enumerate(m.graph.node):
            key = n.name or f"{n.op_type}#{i}"
            op = codec_op(n.domain, n.op_type)
            kind = gk.get(n.name)
            if op is not None:
                cls = f"codec {op.codec} {op.role}"
            elif key in kept:
                cls = "kept"
            else:
                cls = f"new {kind}"
            a = acc[cls]; a[0] += pred.per_node.get(key, 0.0); a[1] += prof.get(key, 0.0); a[2] += 1
        acc["overhead"] = [pred.overhead, prof.overhead_seconds, 1]
        s = prof.step_seconds
        print(f"  {g}: slowdown(own kept) {synth.slowdown(cost):.3f}  pred {pred.total:.3f} vs own profile step {s:.3f} ({pred.total/s-1:+.1%}) load {rec['load'][0]:.2f}")
        for cls, (p, t, c) in sorted(acc.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1])):
            if cls == "kept" or (abs(p - t) < 0.002 and p < 0.01): continue
            print(f"     {cls:34s} n={c:4d} pred {p*1e3:8.1f} ms prof {t*1e3:8.1f} ms diff {(p-t)*1e3:+7.1f} ms ({(p-t)/s:+.1%} of step) ratio {p/max(t,1e-9):.2f}")
            tot[cls][0] += p; tot[cls][1] += t
print("TOTAL by class:", {k: f"{v[0]/max(v[1],1e-9):.2f}" for k, v in sorted(tot.items())})
