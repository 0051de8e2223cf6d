import onnx, json, time
from onnxcomp.planner.growth_budget import plan_for_growth
from onnxcomp.static_batch import prepare_for_transform
m = onnx.load("W/densenet_s/training_model.onnx")
m = prepare_for_transform(m, "W/densenet_s")
t = time.time()
p = plan_for_growth(m, 64 * 1024, exact=True, stop_at_first=False, pyops=None, budget_for="ort-defaults-total",
                    progress=lambda s: print(s, flush=True))
print("took", time.time() - t)
g = p.growth
print({k: g[k] for k in g if k not in ("candidates", "parts")})
json.dump(g, open("T/dn_native.json", "w"), indent=1)
