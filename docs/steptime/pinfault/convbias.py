import numpy as np, onnx, onnxruntime as ort
from onnx import helper as h, TensorProto as T
def model(bias):
    nodes = []
    if bias:
        nodes += [h.make_node("Neg", ["m"], ["nm"]), h.make_node("Conv", ["x", "w", "nm"], ["y"], strides=[2,2], pads=[3,3,3,3], kernel_shape=[7,7])]
    else:
        nodes += [h.make_node("Conv", ["x", "w"], ["c"], strides=[2,2], pads=[3,3,3,3], kernel_shape=[7,7]),
                  h.make_node("Reshape", ["m", "s"], ["m4"]), h.make_node("Sub", ["c", "m4"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4,3,64,64]), h.make_tensor_value_info("w", T.FLOAT, [64,3,7,7]),
         h.make_tensor_value_info("m", T.FLOAT, [64])], [h.make_tensor_value_info("y", T.FLOAT, [4,64,32,32])],
         initializer=[onnx.numpy_helper.from_array(np.array([1,64,1,1], np.int64), "s")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
rng = np.random.default_rng(0)
for threads in (1, 2):
  for lvl in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.graph_optimization_level = lvl
    a = ort.InferenceSession(model(False).SerializeToString(), so, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(model(True).SerializeToString(), so, providers=["CPUExecutionProvider"])
    bad = 0
    for t in range(20):
        x = rng.standard_normal((4,3,64,64), np.float32) * rng.uniform(0.1, 100)
        w = rng.standard_normal((64,3,7,7), np.float32) * 0.1
        m = rng.standard_normal(64).astype(np.float32) * rng.uniform(0.1, 10)
        ya = a.run(None, {"x": x, "w": w, "m": m})[0]; yb = b.run(None, {"x": x, "w": w, "m": m})[0]
        bad += int((ya.view(np.uint32) != yb.view(np.uint32)).sum())
    print("threads", threads, "opt", lvl, "differing elements over 20 trials:", bad)
