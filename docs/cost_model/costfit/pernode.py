"""Per-node predicted vs profiled times of a transformed graph (baseline profiled in the same run)."""
import json, sys, os, time, warnings, collections
from pathlib import Path
import onnx
from onnxcomp.planner.cost_model import CostModel, NodeTimes, node_features, node_weights, predict_step, profile_node_seconds
from onnxcomp.runtime.session import RuntimeSettings

art = Path(sys.argv[1]); graphs = sys.argv[2].split(","); out = Path(sys.argv[3])
settings = RuntimeSettings() if len(sys.argv) < 5 or sys.argv[4] == "measure" else RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
res = {"load": [os.getloadavg()[0]]}
base = profile_node_seconds(art, steps=3, settings=settings)
res["base"] = base.to_dict()
for g in graphs:
    p = profile_node_seconds(art, model=g, steps=3, settings=settings)
    res[g] = p.to_dict()
res["load"].append(os.getloadavg()[0])
out.write_text(json.dumps(res))
print("load", res["load"])
