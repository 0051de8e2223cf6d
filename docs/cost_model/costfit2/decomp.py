"""What a transformed graph's step is made of: predicted (from a settled baseline profile of the same hold) vs the
graph's own in-step profile, by class: kept nodes, new ORT nodes, codec ops per codec, outside the nodes."""
import json, sys, warnings; warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
src, graphs, bidx = sys.argv[1], sys.argv[2].split(","), [int(x) for x in sys.argv[3].split(",")]
d = json.load(open(src)); art = Path(d["art"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
cost = CostModel.load()
for g in graphs:
    m = onnx.load(str(art / g), load_external_data=False)
    gp = NodeTimes.from_dict(d["profiles"][g][0]["nt"])
    for bi in bidx:
        base = NodeTimes.from_dict(d["profiles"]["training_model.onnx"][bi]["nt"]); base.features, base.weights = node_features(bg), node_weights(bg)
        sp = predict_step(m, cost, base)
        cls = {}
        for i, n in enumerate(m.graph.node):
            k = n.name or f"{n.op_type}#{i}"
            c = ("codec " + sp.codec_nodes[k][0]) if k in sp.codec_nodes else ("kept " if k in base else "new ") + n.op_type if n.op_type in ("Cast", "ConvGrad", "Conv", "FusedConv") else ("kept" if k in base else "new ORT")
            c = c if c.startswith("codec") else ("kept" if k in base else "new ORT")
            p, q = cls.get(c, (0.0, 0.0)); cls[c] = (p + sp.per_node[k], q + gp.get(k, 0.0))
        cls["outside nodes"] = (sp.overhead, gp.overhead_seconds)
        print(f"{g} (baseline profile #{bi}: {base.step_seconds:.3f} s; graph profiled {gp.step_seconds:.3f} s; predicted {sp.total:.3f} s, {sp.total / gp.step_seconds - 1:+.1%})")
        for c, (p, q) in sorted(cls.items(), key=lambda x: -x[1][1]):
            print(f"   {c:22s} predicted {p*1e3:7.1f} ms  profiled {q*1e3:7.1f} ms  gap {(p-q)*1e3:+7.1f} ms  ratio {q/p if p else float('nan'):5.2f}")
