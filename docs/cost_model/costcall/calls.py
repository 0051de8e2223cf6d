"""Per codec PyOp in stored in-step profiles: (settings, graph, codec, role, bytes, predicted, profiled)."""
import json, sys, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, predict_step
D = Path("/work/wt/costcall/docs/cost_model")
cost = CostModel.load(None)
rows = []
def add(src, art, g, base_d, prof_d, settings, load):
    base = NodeTimes.from_dict(base_d)
    base.features = node_features(onnx.load(str(art / "training_model.onnx"), load_external_data=False))
    prof = NodeTimes.from_dict(prof_d)
    m = onnx.load(str(art / g), load_external_data=False)
    pred = predict_step(m, cost, base)
    for n, (c, role, size, nz) in pred.codec_nodes.items():
        if n not in prof: continue
        rows.append(dict(src=src, art=art.name, settings=settings, arena=bool(base.settings.get("arena")), graph=g,
                         node=n, codec=c, role=role, bytes=size, nz=nz, pred=pred.per_node[n], prof=prof[n], load=load))
for f in ["costgap/p_r18_ort.json", "costgap/p_mnv2_ort.json", "costgap/pm_r18_ort.json"]:
    d = json.load(open(D / f)); art = Path(d["art"])
    base_d = d["profiles"]["training_model.onnx"][0]["nt"]
    for g, lst in d["profiles"].items():
        if g == "training_model.onnx": continue
        for p in lst:
            add(f, art, g, base_d, p["nt"], d["settings"], p.get("load"))
for f, a, st in [("is_r18_ort", "resnet18", "ort"), ("is_mnv2_ort", "mobilenet_v2", "ort"),
                 ("is_r18_measure", "resnet18", "measure"), ("is_mnv2_measure", "mobilenet_v2", "measure")]:
    d = json.load(open(D / "costquiet" / (f + ".json")))
    add("costquiet/" + f, Path("/tmp/costall") / a, "dpr-fp16.onnx", d["base"], d["graph"], st, d["load"])
json.dump(rows, open(sys.argv[1], "w"), indent=0)
print(len(rows))
