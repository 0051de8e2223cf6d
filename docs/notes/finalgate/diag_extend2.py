import sys
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op
d, meas, win = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = Path(f"/tmp/finalgate/{d}/training_model.onnx"); c = Path(f"optcache/{d.replace('/', '_')}.onnx")
if not c.exists(): onnx.save(op.ort_optimized_model(p), str(c))
opt = onnx.load(str(c)); sh = op.ort_static_shapes(opt, onnx.load(str(p), load_external_data=False))
plan = op.allocation_plan(opt, sh); n = len(plan.nodes)
sce = next(i for i, x in enumerate(plan.nodes) if x.op_type == "SoftmaxCrossEntropyLoss")
print("base", op.pattern_block(plan).size, "meas", meas, "sce at", sce, "of", n)
for b in list(plan.end):
    if abs(plan.start[b] - sce) > win: continue
    old = plan.end[b]
    if old == n: continue
    plan.end[b] = n
    s = op.pattern_block(plan).size
    print("  ", plan.nodes[plan.start[b]].op_type, b[-50:], plan.nbytes(b), old - sce, s, "HIT" if abs(s - meas) <= 1024 else "")
    plan.end[b] = old
