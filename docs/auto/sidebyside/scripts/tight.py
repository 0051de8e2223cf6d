"""Tightest step-peak budget `auto --exact` accepts (tools/bench_auto.py's ladder); prints bytes."""
import json, sys, time
sys.path.insert(0, "/work/wt/sidebyside/tools")
import onnx
from bench_auto import tightest_budget
t = time.time()
model = onnx.load(sys.argv[1] + "/training_model.onnx")
budget, plan, tried = tightest_budget(model, True)
json.dump({"budget_bytes": budget, "predicted_peak_bytes": plan.predicted_peak, "plans_tried": tried,
           "search_s": time.time() - t, "baseline_predicted_peak_bytes": plan.baseline_peak}, open(sys.argv[2], "w"))
print(budget)
