import json, sys, warnings, glob
warnings.simplefilter("ignore")
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights
cost = CostModel.load(None)
feats = {}
for f in sys.argv[1:]:
    d = json.load(open(f))
    for k, e in d["runs"].items():
        nt = NodeTimes.from_dict(e["profile"])
        if e["dir"] not in feats:
            bg = onnx.load(f"{e['dir']}/training_model.onnx", load_external_data=False); feats[e["dir"]] = node_features(bg)
        nt.features = feats[e["dir"]]
        print(f"{f.split('/')[-1]:34s} {k[:40]:40s} S={nt.slowdown(cost):.3f} load {e.get('profile_load')}")
