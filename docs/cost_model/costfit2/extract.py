"""Per stored measured graph: measured step, base prediction, codec seconds by (codec, direction)."""
import json, sys, os, warnings, time
warnings.simplefilter("ignore")
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step, op_kind, HALF_CASTS, _tensor_shapes
ROOT = "/work/wt/costfit2/"
sets = {"Q": [f"docs/cost_model/costquiet/q_{m}_{s}.json" for m in ("mobilenet_v2", "resnet18", "vgg16") for s in ("measure", "ort-default")]}
for s in "ABC":
    sets[s] = open(ROOT + f"docs/cost_model/costgap/set{s}").read().split()
cost = CostModel.load(os.environ.get("COST") or None)
rows = []; feats = {}; graphs = {}
t0 = time.time()
for tag, files in sets.items():
    for f in files:
        d = json.load(open(ROOT + f))
        for k, e in d["runs"].items():
            if "profile" not in e: continue
            nt = NodeTimes.from_dict(e["profile"]); art = e["dir"]
            if art not in feats:
                bg = onnx.load(f"{art}/training_model.onnx", load_external_data=False); feats[art] = (node_features(bg), node_weights(bg))
            nt.features, nt.weights = feats[art]
            for g, x in e["graphs"].items():
                if "measured_s" not in x or not os.path.exists(f"{art}/{g}"): continue
                if (art, g) not in graphs: graphs[(art, g)] = onnx.load(f"{art}/{g}", load_external_data=False)
                sp = predict_step(graphs[(art, g)], cost, nt)
                by = {}
                for name, (c, r, size, nz) in sp.codec_nodes.items():
                    by[f"{c}/{r}"] = by.get(f"{c}/{r}", 0.0) + sp.per_node[name]
                gm = graphs[(art, g)]; dt = _tensor_shapes(gm)[2]
                for i, n in enumerate(gm.graph.node):
                    key = n.name or f"{n.op_type}#{i}"
                    if key in sp.codec_nodes or key in nt: continue
                    kd = op_kind(n, dt)
                    cls = "new:halfcast" if kd in HALF_CASTS else "new:other"
                    by[cls] = by.get(cls, 0.0) + sp.per_node[key]
                rows.append(dict(set=tag, file=f, run=k, model=os.path.basename(art), settings=e["settings"], graph=g,
                                 measured=x["measured_s"], steps=x.get("steps_s"), pred=sp.total, codec=by))
print(len(rows), "rows", time.time() - t0, "s", file=sys.stderr)
json.dump(rows, open(sys.argv[1], "w"), indent=0)
