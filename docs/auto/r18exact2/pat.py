"""Layout at a step: python pat.py MODEL STEP"""
import sys, onnx
from onnxcomp.planner.ort_pattern import ort_static_shapes, allocation_plan, pattern_block
opt = onnx.load(sys.argv[1]); orig = onnx.load(sys.argv[3], load_external_data=False) if len(sys.argv) > 3 else None
plan = allocation_plan(opt, ort_static_shapes(opt, orig)); blk = pattern_block(plan)
MiB = 2**20; s = int(sys.argv[2])
print("P", blk.size / MiB, "step", s, plan.nodes[s].name)
ov = [(o, z, x) for x, (o, z) in blk.offsets.items() if plan.start[x] <= s <= plan.end[x]]
print("live", sum(z for o, z, x in ov) / MiB)
for o, z, x in sorted(ov):
    print(f"{o/MiB:9.4f} {z:10d} [{plan.start[x]:5d},{plan.end[x]:5d}] {plan.nodes[plan.start[x]].op_type:22s} {x}")
