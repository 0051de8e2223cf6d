import numpy as np, onnx, onnxruntime as ort, time, sys
from onnx import helper as h, TensorProto as T
def sess(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]); m.ir_version = 8
    so = ort.SessionOptions(); 
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
N = [32, 64, 32, 32]
X = h.make_tensor_value_info("x", T.FLOAT, N)
Y16 = h.make_tensor_value_info("y", T.FLOAT16, N)
lo = h.make_tensor("lo", T.FLOAT, [], [-65504.0]); hi = h.make_tensor("hi", T.FLOAT, [], [65504.0])
from onnx import numpy_helper as nh; lo16 = nh.from_array(np.array(-65504.0, np.float16), "lo16"); hi16 = nh.from_array(np.array(65504.0, np.float16), "hi16")
a = sess([h.make_node("Clip", ["x","lo","hi"], ["c"]), h.make_node("Cast", ["c"], ["y"], to=T.FLOAT16)], [X], [Y16], [lo, hi])
try:
    b = sess([h.make_node("Cast", ["x"], ["c"], to=T.FLOAT16), h.make_node("Clip", ["c","lo16","hi16"], ["y"])], [X], [Y16], [lo16, hi16])
except Exception as e:
    print("fp16 clip fails:", str(e)[:200]); b = None
x = (np.random.default_rng(0).standard_normal(N).astype(np.float32))
x.flat[:12] = [np.nan, -np.nan, np.inf, -np.inf, 65504, 65519.99, 65520, 70000, -70000, 1e-8, -0.0, 6e-5]
ya = a.run(None, {"x": x})[0]
print("A", ya.flat[:12])
if b is not None:
    yb = b.run(None, {"x": x})[0]
    print("B", yb.flat[:12]); print("bit-identical:", np.array_equal(ya.view(np.uint16), yb.view(np.uint16)))
if len(sys.argv) > 1:
    xs = [x.copy() for _ in range(8)]
    for name, s in (("clip32+cast", a), ("cast+clip16", b)):
        if s is None: continue
        ts = []
        for r in range(24):
            t = time.perf_counter(); s.run(None, {"x": xs[r % 8]}); ts.append(time.perf_counter() - t)
        print(name, "median ms", 1e3*np.median(ts), "min", 1e3*min(ts))
