import sys, shutil, onnx
ref, src, dst = sys.argv[1:4]
shutil.copytree(src, dst, dirs_exist_ok=True)
order = [i.name for i in onnx.load(ref + "/training_model.onnx", load_external_data=False).graph.input]
m = onnx.load(src + "/training_model.onnx")
by = {i.name: i for i in m.graph.input}
assert set(by) == set(order)
new = [by[n] for n in order]
del m.graph.input[:]
m.graph.input.extend(new)
onnx.save(m, dst + "/training_model.onnx")
