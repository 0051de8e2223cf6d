import sys
import onnx
from onnxcomp.planner import ort_pattern as op
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
original = onnx.load(path, load_external_data=False)
optimized = op.ort_optimized_model(path)
shapes = op.ort_static_shapes(optimized, original)
plan = op.allocation_plan(optimized, shapes)
block = op.pattern_block(plan)
n = len(plan.nodes)
live = [0] * (n + 1)
for b, (o, sz) in block.offsets.items():
    for s in range(plan.start[b], min(plan.end[b], n) + 1):
        live[s] += sz
order = sorted(range(n + 1), key=lambda s: -live[s])
seen = []
for s in order:
    if all(abs(s - t) > 15 for t in seen):
        seen.append(s)
        nd = plan.nodes[s] if s < n else None
        print(f"{live[s]/M:7.3f} step {s} {nd.op_type if nd else ''} {nd.name[:80] if nd else ''}")
    if len(seen) >= 12: break
