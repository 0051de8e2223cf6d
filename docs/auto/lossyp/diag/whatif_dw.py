"""What-if: a named tensor's planned size divided by k (e.g. a weight gradient made in k blocks): P before/after."""
import sys
import onnx
from onnxcomp.planner import ort_pattern as op
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
k = int(sys.argv[2]); names = sys.argv[3:]
original = onnx.load(path, load_external_data=False)
optimized = op.ort_optimized_model(path)
shapes = op.ort_static_shapes(optimized, original)
plan = op.allocation_plan(optimized, shapes)
print("P before", op.pattern_block(plan).size / M)
sel = names if names != ["ALLWG"] else [y for y in shapes if y.endswith("weight_grad") and plan.nbytes(y) > 512*1024]
for nm in sel:
    et, dims = shapes[nm]
    shapes[nm] = (et, (dims[0] // k, *dims[1:]))
plan = op.allocation_plan(optimized, shapes)
print(len(sel), "P after", op.pattern_block(plan).size / M)
