"""Re-predict stored bench JSONs in-process with this tree's model; print per-graph errors and summaries.
usage: ev.py TAG [-v] FILES..."""
import json, sys, os, statistics, warnings
warnings.simplefilter("ignore")
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
tag = sys.argv[1]; verbose = "-v" in sys.argv; files = [f for f in sys.argv[2:] if f != "-v"]
cost = CostModel.load(os.environ.get("COSTGAP_COST") or None)
errs = {}; graphs = {}; feats = {}
for f in files:
    d = json.load(open(f))
    for k, e in d["runs"].items():
        if "profile" not in e: continue
        nt = NodeTimes.from_dict(e["profile"])
        art = e["dir"]
        if art not in feats:
            bg = onnx.load(f"{art}/training_model.onnx", load_external_data=False); feats[art] = (node_features(bg), node_weights(bg))
        nt.features, nt.weights = feats[art]
        for g, x in e["graphs"].items():
            if "measured_s" not in x: continue
            if not os.path.exists(f"{art}/{g}"): continue
            if (art, g) not in graphs: graphs[(art, g)] = onnx.load(f"{art}/{g}", load_external_data=False)
            p = predict_step(graphs[(art, g)], cost, nt).total
            err = p / x["measured_s"] - 1
            model = os.path.basename(art)
            errs.setdefault((model, e["settings"]), []).append((g, abs(err)))
            if verbose: print(f"  {tag} {os.path.basename(f):32s} {model:12s} {e['settings']:11s} {g:26s} pred {p:.3f} meas {x['measured_s']:.3f} {err:+.1%}")
allv = [v for l in errs.values() for _, v in l]
for k, l in sorted(errs.items()):
    v = [x for _, x in l]
    print(f"{tag} {k}: {len(v)} graphs, within 10% {sum(x <= .10 for x in v)}, mean {statistics.mean(v):.1%}, max {max(v):.1%}")
print(f"{tag} ALL: {len(allv)} graphs, within 10% {sum(x <= .10 for x in allv)}, mean {statistics.mean(allv):.1%}, max {max(allv):.1%}")
