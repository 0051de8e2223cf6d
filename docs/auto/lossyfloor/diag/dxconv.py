import sys, onnx
from onnxcomp.planner import ort_pattern as op
m = onnx.load(sys.argv[1] + "/training_model.onnx", load_external_data=False)
shapes = op._declared(m)
for n in m.graph.node:
    if n.op_type in ("Conv","ConvTranspose") and ("dx_Conv" in n.name or "asconv" in n.name or "dx_conv" in n.output[0]):
        print(n.name[-60:], [ (i[-40:], shapes.get(i, (None,None))[1]) for i in n.input[:2]], shapes.get(n.output[0],(None,None))[1])
