import sys, shutil, onnx
from onnx import helper as h, numpy_helper as nh
import numpy as np
src, dst, c = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copytree(src, dst, dirs_exist_ok=True)
m = onnx.load(src + "/training_model.onnx"); g = m.graph
i = next(j for j, n in enumerate(g.node) if n.op_type == "ConvGrad" and n.name.startswith("/blocks/blocks.0/conv2"))
cg = g.node[i]
for nm, v in (("b_s0", [0]), ("b_e0", [c]), ("b_s1", [c]), ("b_e1", [64]), ("b_ax", [1])):
    g.initializer.append(nh.from_array(np.array(v, np.int64), nm))
dx, dw = cg.output[0], cg.output[1]
cg.output[0] = dx + "_o"; cg.output[1] = dw + "_o"
ex = onnx.NodeProto(); ex.CopyFrom(cg); ex.name = "ex_cg"; del ex.input[:]; ex.input.extend([cg.input[0], "ex_x", "ex_w"])
del ex.output[:]; ex.output.extend(["ex_dx", "ex_dw"])
new = [h.make_node("Slice", [cg.input[1], "b_s0", "b_e0", "b_ax"], ["ex_x"], name="ex_sx"),
       h.make_node("Slice", [cg.input[2], "b_s0", "b_e0", "b_ax"], ["ex_w"], name="ex_sw"), ex,
       h.make_node("Slice", [dx + "_o", "b_s1", "b_e1", "b_ax"], ["r_dx"], name="r_sdx"),
       h.make_node("Slice", [dw + "_o", "b_s1", "b_e1", "b_ax"], ["r_dw"], name="r_sdw"),
       h.make_node("Concat", ["ex_dx", "r_dx"], [dx], axis=1, name="c_dx"),
       h.make_node("Concat", ["ex_dw", "r_dw"], [dw], axis=1, name="c_dw")]
for k, n in enumerate(new): g.node.insert(i + 1 + k, n)
onnx.save(m, dst + "/training_model.onnx")
