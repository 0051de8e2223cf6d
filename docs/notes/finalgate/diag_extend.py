"""Which buffer, held to the end of the step, gives the measured P? (and which other end changes)"""
import sys
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op
d, meas = sys.argv[1], int(sys.argv[2])
p = Path(f"/tmp/finalgate/{d}/training_model.onnx")
c = Path(f"optcache/{d.replace('/', '_')}.onnx")
if not c.exists(): onnx.save(op.ort_optimized_model(p), str(c))
opt = onnx.load(str(c)); orig = onnx.load(str(p), load_external_data=False)
sh = op.ort_static_shapes(opt, orig)
plan = op.allocation_plan(opt, sh)
n = len(plan.nodes)
print("base", op.pattern_block(plan).size, "meas", meas)
for b in list(plan.end):
    old = plan.end[b]
    for new in (n,):
        if new == old: continue
        plan.end[b] = new
        s = op.pattern_block(plan).size
        if abs(s - meas) <= 1024: print("HIT", b[-60:], plan.nbytes(b), "end", old, "->", new, s)
        plan.end[b] = old
