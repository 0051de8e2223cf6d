# Measure P (tools/pattern_block.measure) for each dir; cache optimised graph + shapes for replays.
import sys, json, pickle, os
from pathlib import Path
sys.path.insert(0, "/work/wt/growthmiss/tools")
import pattern_block as pb
import onnx
from onnxcomp.planner import ort_pattern as op_
out = {}
if os.path.exists("Pmeas.json"): out = json.load(open("Pmeas.json"))
for d in sys.argv[1:]:
    if d in out: continue
    p = Path(d)
    m = pb.measure(p)
    orig = onnx.load(str(p / "training_model.onnx"), load_external_data=False)
    opt = op_.ort_optimized_model(p / "training_model.onnx")
    shapes = op_.ort_static_shapes(opt, orig)
    os.makedirs("pk", exist_ok=True)
    pickle.dump((opt, orig, shapes), open("pk/" + d.replace("/", "_") + ".pkl", "wb"))
    out[d] = m
    json.dump(out, open("Pmeas.json", "w"), indent=1)
    print(d, m, flush=True)
