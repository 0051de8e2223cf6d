# fold Cast(native decode) into a float-LUT Gather WITHOUT moving the decode nodes (scratch variant)
import sys, onnx, numpy as np
from onnx import numpy_helper as nh, TensorProto as T
m = onnx.load(sys.argv[1], load_external_data=False); g = m.graph
prod = {o: n for n in g.node for o in n.output}
uses = {}
for n in g.node:
    for i in n.input: uses.setdefault(i, []).append(n)
lutb = nh.to_array([i for i in g.initializer if i.name == "onnxcomp_bits_lut_bool"][0])
g.initializer.append(nh.from_array(lutb.astype(np.float32), "onnxcomp_bits_lut_float"))
vi = {v.name: v for v in g.value_info}
plan = []
for cast in g.node:
    if cast.op_type != "Cast" or not cast.name.endswith("__as_float__cast"): continue
    r = prod.get(cast.input[0])
    if r is None or r.op_type != "Reshape" or len(uses[cast.input[0]]) != 1: continue
    ga = prod[r.input[0]]
    if ga.op_type != "Gather" or ga.input[0] != "onnxcomp_bits_lut_bool" or len(uses[ga.output[0]]) != 1: continue
    plan.append((cast.name, cast.output[0], r.output[0], ga.output[0]))
gat = {p[3] for p in plan}; ren = {p[1]: p[2] for p in plan}; drop = {p[0] for p in plan}
for name in [p[2] for p in plan] + list(gat):
    if name in vi: vi[name].type.tensor_type.elem_type = T.FLOAT
keep = [n for n in g.node if n.name not in drop]
for n in keep:
    if n.op_type == "Gather" and n.output[0] in gat: n.input[0] = "onnxcomp_bits_lut_float"
    for j, i in enumerate(n.input):
        if i in ren: n.input[j] = ren[i]
del g.node[:]; g.node.extend(keep); k = len(plan)
print("folded", k)
onnx.save(m, sys.argv[2])
