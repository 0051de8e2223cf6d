import onnx, json, sys, time
from onnxcomp.planner.growth_budget import plan_for_growth
from onnxcomp.static_batch import prepare_for_transform
net, lo, hi, step = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
M = 1 << 20
m = prepare_for_transform(onnx.load(f"W/{net}/training_model.onnx"), f"W/{net}")
targets = []
x = hi
while x >= lo:
    targets.append(int(x * M)); x -= step
t = time.time()
from onnxcomp.planner import memo
cands = []
with memo.planning_session():
    for b in targets:
        p = plan_for_growth(m, 64 * 1024, exact=True, stop_at_first=False, pyops=None, budget_for="ort-defaults-total",
                            step_budgets=[b])
        cands += [c for c in p.growth["candidates"] if c["step_budget_bytes"] is not None]
print("took %.0f s" % (time.time() - t))
for c in cands:
    g = c["growth_parts"]
    if g:
        print("step %s pyops %s growth %.2f setup %.2f total %.2f P %.2f nodes %d" % (
            c["step_budget_bytes"] and round(c["step_budget_bytes"] / M, 2), c["pyops"], g["growth_bytes"] / M,
            g["set_up_added_bytes"] / M, g["total_bytes"] / M, g["pattern_bytes"] / M, g["nodes"]))
