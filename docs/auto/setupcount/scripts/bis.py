import sys, shutil, onnx
from onnx import helper as h, numpy_helper as nh
import numpy as np
src, dst, mode = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.copytree(src, dst, dirs_exist_ok=True)
m = onnx.load(src + "/training_model.onnx"); g = m.graph
i = next(j for j, n in enumerate(g.node) if n.op_type == "ConvGrad" and n.name.startswith("/blocks/blocks.0/conv2"))
cg = g.node[i]
for nm, v in (("bis_s0", [0]), ("bis_e0", [32]), ("bis_s1", [32]), ("bis_e1", [64]), ("bis_ax", [1])):
    g.initializer.append(nh.from_array(np.array(v, np.int64), nm))
def sc(x, tag):
    return [h.make_node("Slice", [x, "bis_s0", "bis_e0", "bis_ax"], [f"{tag}_a"], name=f"{tag}_sa"),
            h.make_node("Slice", [x, "bis_s1", "bis_e1", "bis_ax"], [f"{tag}_b"], name=f"{tag}_sb"),
            h.make_node("Concat", [f"{tag}_a", f"{tag}_b"], [f"{tag}_c"], axis=1, name=f"{tag}_cc")]
if mode == "x":
    new = sc(cg.input[1], "bisx"); cg.input[1] = "bisx_c"
    for n in reversed(new): g.node.insert(i, n)
elif mode == "dw":
    out = cg.output[1]; cg.output[1] = out + "_pre"
    new = sc(out + "_pre", "bisw"); new[-1].output[0] = out
    for k, n in enumerate(new): g.node.insert(i + 1 + k, n)
elif mode == "dx":
    out = cg.output[0]; cg.output[0] = out + "_pre"
    new = sc(out + "_pre", "bisdx"); new[-1].output[0] = out
    for k, n in enumerate(new): g.node.insert(i + 1 + k, n)
onnx.save(m, dst + "/training_model.onnx")
if mode == "extra":
    m = onnx.load(dst + "/training_model.onnx"); g = m.graph
    i = next(j for j, n in enumerate(g.node) if n.op_type == "ConvGrad" and n.name.startswith("/blocks/blocks.0/conv2"))
    cg = g.node[i]
    new = [h.make_node("Slice", [cg.input[1], "bis_s0", "bis_e0", "bis_ax"], ["ex_x"], name="ex_sx"),
           h.make_node("Slice", [cg.input[2], "bis_s0", "bis_e0", "bis_ax"], ["ex_w"], name="ex_sw")]
    ex = onnx.NodeProto(); ex.CopyFrom(cg); ex.name = "ex_cg"; del ex.input[:]; ex.input.extend([cg.input[0], "ex_x", "ex_w"])
    del ex.output[:]; ex.output.extend(["ex_dx", "ex_dw"])
    new.append(ex)
    new.append(h.make_node("Concat", ["ex_dw", "ex_dw"], ["ex_dwc"], axis=1, name="ex_c"))
    new.append(h.make_node("Add", ["ex_dwc", cg.output[1]], ["ex_sum"], name="ex_add"))
    for k, n in enumerate(new): g.node.insert(i + 1 + k, n)
    # keep it alive: the And chain? make it feed the weight grad: weight_grad = original + 0*ex_sum is not exact; leave dangling
    onnx.save(m, dst + "/training_model.onnx")
