import json, warnings; warnings.simplefilter("ignore")
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step
D = Path("/work/wt/costcall/docs/cost_model/costcall"); d = json.load(open(D / "q2_mnv2_ort.json")); art = Path(d["art"])
bg = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
for bi in (1, 2, 3):
    base = NodeTimes.from_dict(d["profiles"]["training_model.onnx"][bi]["nt"]); base.features, base.weights = node_features(bg), node_weights(bg)
    for g in ("lossless.onnx", "dpr-fp8.onnx", "comet.onnx"):
        prof = d["profiles"][g][0]["nt"]["step_seconds"]; m = onnx.load(str(art / g), load_external_data=False)
        print(f"baseline #{bi+1} ({base.step_seconds:.3f}) {g:14s} profiled {prof:.3f} " + "  ".join(
            f"{v} {predict_step(m, CostModel.load(f'/tmp/costcall/cost_{v}.json'), base).total/prof-1:+.1%}" for v in ("zero", "c104", "scale_only", "scale_c")))
