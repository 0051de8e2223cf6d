import sys, shutil, onnx
src, dst = sys.argv[1:3]
shutil.copytree(src, dst, dirs_exist_ok=True)
m = onnx.load(src + "/training_model.onnx"); g = m.graph
keep = [n for n in g.node if not any(o.startswith("onnxcomp_accumulation_order") for o in n.output)]
print(len(g.node) - len(keep), "chain nodes dropped")
del g.node[:]; g.node.extend(keep)
onnx.save(m, dst + "/training_model.onnx")
