"""In-step half Casts: profiled time per byte vs their source class (dense / ReLU-like), vs the model's price.
usage: instep.py ART GRAPH SETTINGS(measure|ort) OUT.json"""
import json, sys, os, collections, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import (CostModel, NodeTimes, node_features, node_weights, predict_step, profile_node_seconds,
                                         _tensor_shapes, op_kind, estimate_nonzero, constant_scalars, node_traffic, HALF_CASTS)
from onnxcomp.runtime.session import RuntimeSettings
art, g, st, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
settings = RuntimeSettings() if st == "measure" else RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
load = [os.getloadavg()[0]]
if not os.path.exists(out):
    base = profile_node_seconds(art, steps=3, settings=settings)
    prof = profile_node_seconds(art, model=g, steps=3, settings=settings)
    load.append(os.getloadavg()[0])
    json.dump({"base": base.to_dict(), "graph": prof.to_dict(), "load": load}, open(out, "w"))
res = json.load(open(out))
base = NodeTimes.from_dict(res["base"]); prof = NodeTimes.from_dict(res["graph"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
base.features, base.weights = node_features(bg), node_weights(bg)
m = onnx.load(str(art / g), load_external_data=False)
shapes, nbytes, dtypes = _tensor_shapes(m)
producers = {o: n for n in m.graph.node for o in n.output if o}
consts = constant_scalars(m)
for tag, path in (("new", None), ("nomix", "/tmp/costquiet/cal_nomix.json"), ("main", "/work/main/onnxcomp/planner/cost_model_defaults.json")):
    cost = CostModel.load(path)
    pred = predict_step(m, cost, base)
    sd = base.slowdown(cost)
    acc = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for n in m.graph.node:
        k = op_kind(n, dtypes)
        if k not in HALF_CASTS:
            continue
        nz = estimate_nonzero(n.input[0], producers, consts)
        cls = f"{k.split(':')[1]} {'relu-like' if nz < 0.9 else 'dense'}"
        tr = node_traffic(n, sum(nbytes.get(i, 0) for i in n.input), sum(nbytes.get(o, 0) for o in n.output))
        a = acc[cls]; a[0] += tr; a[1] += prof.get(n.name, 0.0); a[2] += pred.per_node.get(n.name, 0.0); a[3] += 1
    print(f"{g} {st} model={tag} slowdown {sd:.2f} load {res['load']} step profiled {prof.step_seconds:.3f} predicted {pred.total:.3f}")
    for cls, (tr, t, p, c) in sorted(acc.items()):
        print(f"   {cls:28s} n={c:3d} {tr/2**20:7.1f} MiB moved  in-step {t*1e3:7.1f} ms ({t/tr*1e9:.2f} ns/B)  predicted {p*1e3:7.1f} ms ({p/tr*1e9:.2f} ns/B, {p/max(t,1e-12):.2f}x)")
