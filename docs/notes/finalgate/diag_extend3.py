import sys
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op
d, meas, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
p = Path(f"/tmp/finalgate/{d}/training_model.onnx"); c = Path(f"optcache/{d.replace('/', '_')}.onnx")
opt = onnx.load(str(c)); sh = op.ort_static_shapes(opt, onnx.load(str(p), load_external_data=False))
plan = op.allocation_plan(opt, sh); n = len(plan.nodes)
for b in list(plan.end):
    if not (lo <= plan.start[b] <= hi): continue
    old = plan.end[b]; first = None
    for e in range(old + 1, n + 1):
        plan.end[b] = e
        if abs(op.pattern_block(plan).size - meas) <= 256: first = e; break
    plan.end[b] = old
    if first is not None: print(plan.nodes[plan.start[b]].op_type, b[-45:], "start", plan.start[b], "end", old, "-> first exact at", first, plan.nodes[first - 1].op_type if first <= n else "", plan.nodes[first].op_type if first < n else "END")
