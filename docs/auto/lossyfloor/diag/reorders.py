import sys, onnx
from onnxcomp.planner import ort_pattern as op
opt = op.ort_optimized_model(sys.argv[1] + "/training_model.onnx")
prod = {o: n for n in opt.graph.node for o in n.output}
from collections import Counter
print(Counter(n.op_type for n in opt.graph.node).most_common(25))
for n in opt.graph.node:
    if "dx_Conv" in n.name or "asconv" in n.name:
        ins = [(i, prod[i].op_type if i in prod else "-") for i in n.input]
        print(n.op_type, n.domain, n.name[:80], ins[:2])
        break
