"""Predict growth (this worktree's ort_growth) for each dir; V/<tag>.pred.json"""
import json, sys, time
from pathlib import Path
from onnxcomp.planner import ort_growth
for d in sys.argv[1:]:
    t = d.replace("/", "_")
    out = Path(f"/tmp/lossygrowth/V/{t}.pred{sys.argv[0].split('pred')[-1].split('.')[0]}.json")
    t0 = time.time()
    try:
        g = ort_growth.predict_growth(f"/tmp/lossygrowth/{d}/training_model.onnx")
        r = g.to_dict()
    except Exception as e:
        r = {"error": str(e)}
    r["seconds"] = round(time.time() - t0, 1)
    out.write_text(json.dumps(r))
    print(d, r.get("growth_bytes"), r["seconds"], flush=True)
