import sys, onnx
from onnxcomp.planner import ort_pattern as op
from gapplan import allocation_plan_gap
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
original = onnx.load(path, load_external_data=False)
optimized = op.ort_optimized_model(path)
shapes = op.ort_static_shapes(optimized, original)
print("P ORT rule", round(op.pattern_block(op.allocation_plan(optimized, shapes)).size / M, 3))
for gap in (10**9, 2000, 1000, 500, 200, 100, 50):
    print("gap", gap, "P", round(op.pattern_block(allocation_plan_gap(gap, optimized, shapes)).size / M, 3))
