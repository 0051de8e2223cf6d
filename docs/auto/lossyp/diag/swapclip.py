"""Rewrite every native fp16 encoder Clip(f32)->Cast(f16) as Cast(f16)->Clip(f16) in a plan dir copy; predict growth."""
import sys, shutil, os, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
src, dst = sys.argv[1], sys.argv[2]
if os.path.exists(dst): shutil.rmtree(dst)
shutil.copytree(src, dst)
p = dst + "/training_model.onnx"
m = onnx.load(p)
g = m.graph
prod = {o: n for n in g.node for o in n.output}
cons = {}
for n in g.node:
    for i in n.input: cons.setdefault(i, []).append(n)
g.initializer.extend([nh.from_array(np.array(-65504, np.float16), "f16min"), nh.from_array(np.array(65504, np.float16), "f16max")])
k = 0
for n in list(g.node):
    if n.op_type == "Clip" and n.output[0].endswith("__fp16_clipped"):
        (cast,) = cons[n.output[0]]
        assert cast.op_type == "Cast"
        x, clipped, payload = n.input[0], n.output[0], cast.output[0]
        # Cast first to a new name, Clip reads it and writes the payload name
        n.op_type = "Cast"; del n.input[:]; n.input.append(x); del n.attribute[:]; n.attribute.append(h.make_attribute("to", T.FLOAT16))
        cast.op_type = "Clip"; del cast.input[:]; cast.input.extend([clipped, "f16min", "f16max"]); del cast.attribute[:]
        for vi in g.value_info:
            if vi.name == clipped: vi.type.tensor_type.elem_type = T.FLOAT16
        k += 1
print("swapped", k)
onnx.save(m, p)
