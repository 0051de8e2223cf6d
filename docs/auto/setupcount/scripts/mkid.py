import sys, shutil, onnx
src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copytree(src, dst, dirs_exist_ok=True)
m = onnx.load(src + "/training_model.onnx")
g = m.graph
# a chain of k Identity nodes on the first ConvGrad's dY edge
i = next(j for j, n in enumerate(g.node) if n.op_type == "ConvGrad")
v = g.node[i].input[0]
nodes = []
for t in range(k):
    out = f"{v}__id{t}"
    nodes.append(onnx.helper.make_node("Identity", [v], [out], name=f"idchain{t}"))
    v = out
g.node[i].input[0] = v
for n in reversed(nodes):
    g.node.insert(i, n)
onnx.save(m, dst + "/training_model.onnx")
print(len(g.node))
