import time, os, sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T
import onnxruntime as ort
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2 * 1024 * 1024
shape = [N // 1024, 1024]
def model(nodes, inputs, outputs):
    g = h.make_graph(nodes, "g", inputs, outputs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m
vi = lambda n, t: h.make_tensor_value_info(n, t, shape)
zero = h.make_tensor("zero", T.FLOAT, [], [0.0])
graphs = {
 "relugrad_castmask": model([h.make_node("Cast", ["m"], ["mf"], to=T.FLOAT),
                              h.make_node("ReluGrad", ["dy", "mf"], ["dx"], domain="com.microsoft")],
                             [vi("dy", T.FLOAT), vi("m", T.BOOL)], [vi("dx", T.FLOAT)]),
 "relugrad_floatx": model([h.make_node("ReluGrad", ["dy", "x"], ["dx"], domain="com.microsoft")],
                           [vi("dy", T.FLOAT), vi("x", T.FLOAT)], [vi("dx", T.FLOAT)]),
 "cast_mask": model([h.make_node("Cast", ["m"], ["mf"], to=T.FLOAT)], [vi("m", T.BOOL)], [vi("mf", T.FLOAT)]),
 "where": model([h.make_node("Where", ["m", "dy", "zero"], ["dx"])],
                [vi("dy", T.FLOAT), vi("m", T.BOOL)], [vi("dx", T.FLOAT)]),
 "mul": model([h.make_node("Mul", ["dy", "x"], ["dx"])], [vi("dy", T.FLOAT), vi("x", T.FLOAT)], [vi("dx", T.FLOAT)]),
 "relu": model([h.make_node("Relu", ["dy"], ["dx"])], [vi("dy", T.FLOAT)], [vi("dx", T.FLOAT)]),
 "cast16": model([h.make_node("Cast", ["dy"], ["h"], to=T.FLOAT16)], [vi("dy", T.FLOAT)], [vi("h", T.FLOAT16)]),
 "cast16to32": model([h.make_node("Cast", ["h"], ["dx"], to=T.FLOAT)], [vi("h", T.FLOAT16)], [vi("dx", T.FLOAT)]),
}
graphs["where"].graph.initializer.append(zero)
so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False
rng = np.random.default_rng(0)
dy = rng.standard_normal(shape).astype(np.float32)
m = rng.standard_normal(shape) > 0
feeds = {
 "relugrad_castmask": {"dy": dy, "m": m},
 "relugrad_floatx": {"dy": dy, "x": m.astype(np.float32)},
 "relugrad_floatx_ones": {"dy": dy, "x": np.ones(shape, np.float32)},
 "cast_mask": {"m": m},
 "where": {"dy": dy, "m": m},
 "mul": {"dy": dy, "x": m.astype(np.float32)},
 "relu": {"dy": dy},
 "cast16": {"dy": dy},
 "cast16to32": {"h": dy.astype(np.float16)},
}
sess = {k: ort.InferenceSession(graphs[k.replace("_ones", "")].SerializeToString(), so, providers=["CPUExecutionProvider"]) for k in feeds}
ref = np.where(m, dy, np.float32(0))
for k in ("where", "relugrad_castmask"):
    out = sess[k].run(None, feeds[k])[0]
    print(k, "bit-identical to np.where:", np.array_equal(out.view(np.uint32), ref.view(np.uint32)))
res = {k: ([], []) for k in feeds}
for r in range(15):
    for k in feeds:
        w, c = time.perf_counter(), time.process_time()
        sess[k].run(None, feeds[k])
        res[k][0].append(time.perf_counter() - w); res[k][1].append(time.process_time() - c)
print("N", N, "load", os.getloadavg(), "threshold", os.environ.get("MALLOC_MMAP_THRESHOLD_"))
for k, (w, c) in res.items():
    print(f"{k:24s} wall min {min(w)*1e3:7.2f} med {np.median(w)*1e3:7.2f} ms  cpu med {np.median(c)*1e3:7.2f} ms")
