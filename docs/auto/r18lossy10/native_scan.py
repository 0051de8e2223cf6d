"""Price ResNet-18 candidates under the growth model with/without codec PyOps (experiment, not product)."""
import json, sys, time
import onnx
from onnxcomp.planner.growth_budget import plan_for_growth
MiB = 2**20
src, pyops, out = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
budgets = [int(float(x) * MiB) for x in sys.argv[4:]]
m = onnx.load(src)
t = time.time()
plan = plan_for_growth(m, 1, step_budgets=budgets or None, stop_at_first=False, pyops=pyops,
                       progress=lambda s: print(f"[{time.time()-t:.0f}s] {s}", file=sys.stderr, flush=True))
json.dump(plan.growth, open(out, "w"), indent=1)
for c in plan.growth["candidates"]:
    p = c["growth_parts"] or {}
    print(c["step_budget_bytes"] and round(c["step_budget_bytes"] / MiB, 2), c["step_plan_fits"],
          round(c["predicted_peak_bytes"] / MiB, 2), c["predicted_growth_bytes"] and round(c["predicted_growth_bytes"] / MiB, 2),
          {k: round(p[k] / MiB, 2) for k in ("pattern_bytes", "arena_bytes", "node_bytes", "heap_bytes", "residue_bytes") if k in p},
          p.get("nodes"), p.get("heap_at"))
