import sys, onnx
from onnxcomp.planner import ort_pattern as op
from phaseplan import allocation_plan_phase
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
original = onnx.load(path, load_external_data=False)
optimized = op.ort_optimized_model(path)
shapes = op.ort_static_shapes(optimized, original)
nodes = list(optimized.graph.node)
bwd = next(i for i, n in enumerate(nodes) if n.op_type.startswith("SoftmaxCrossEntropyLossGrad") or n.op_type.endswith("LossGrad"))
print("first backward step", bwd, nodes[bwd].op_type)
print("P ORT rule", round(op.pattern_block(op.allocation_plan(optimized, shapes)).size / M, 3))
key = sys.argv[2] if len(sys.argv) > 2 else "inchain"
for label, pred in (("all", lambda y, b: True), (key, lambda y, b: key in y and key in b)):
    print(label, "P", round(op.pattern_block(allocation_plan_phase(bwd, pred, optimized, shapes)).size / M, 3))
