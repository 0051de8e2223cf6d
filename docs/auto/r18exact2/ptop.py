"""Which buffers set P: the top allocation and what sits under it at its time."""
import sys, onnx
from onnxcomp.planner.ort_pattern import ort_optimized_model, ort_static_shapes, allocation_plan, pattern_block
path = sys.argv[1]
orig = onnx.load(path, load_external_data=False)
opt = ort_optimized_model(path)
onnx.save(opt, sys.argv[2]) if len(sys.argv) > 2 else None
plan = allocation_plan(opt, ort_static_shapes(opt, orig))
blk = pattern_block(plan)
MiB = 2**20
print("P", blk.size, blk.size / MiB, "nodes", len(plan.nodes), "dynamic", len(blk.dynamic))
# live peak in P
import numpy as np
n = len(plan.nodes); live = np.zeros(n + 1)
for b, (off, sz) in blk.offsets.items():
    live[plan.start[b]:plan.end[b] + 1] += sz
print("live peak", live.max() / MiB, "at", int(live.argmax()), plan.nodes[int(live.argmax())].name)
tops = sorted(blk.offsets.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:5]
for b, (off, sz) in tops:
    print("top", b, off / MiB, sz, plan.start[b], plan.end[b], plan.nodes[plan.start[b]].op_type, plan.nodes[plan.start[b]].name)
b, (off, sz) = tops[0]
s = plan.start[b]
print("--- buffers overlapping", b, "at its start step", s, "live there", live[s] / MiB)
ov = [(o, z, x) for x, (o, z) in blk.offsets.items() if plan.start[x] <= plan.end[b] and plan.end[x] >= s]
for o, z, x in sorted(ov):
    print(f"{o/MiB:9.4f} {z:10d} [{plan.start[x]:5d},{plan.end[x]:5d}] {plan.nodes[plan.start[x]].op_type:22s} {x}")
