import time, os, sys, numpy as np
from onnx import helper as h, TensorProto as T
import onnxruntime as ort
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2 * 1024 * 1024
shape = [N // 1024, 1024]
def model(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]); m.ir_version = 8
    return m
vi = lambda n, t: h.make_tensor_value_info(n, t, shape)
c = lambda n, v: h.make_tensor(n, T.FLOAT, [], [v])
ins = [vi("dy", T.FLOAT), vi("m", T.BOOL)]
cast = h.make_node("Cast", ["m"], ["mf"], to=T.FLOAT)
graphs = {
 "relugrad": model([cast, h.make_node("ReluGrad", ["dy", "mf"], ["dx"], domain="com.microsoft")], ins, [vi("dx", T.FLOAT)]),
 "mul": model([cast, h.make_node("Mul", ["dy", "mf"], ["dx"])], ins, [vi("dx", T.FLOAT)]),
 "mul_add0": model([cast, h.make_node("Mul", ["dy", "mf"], ["p"]), h.make_node("Add", ["p", "zero"], ["dx"])], ins, [vi("dx", T.FLOAT)], [c("zero", 0.0)]),
 "mul_addz": model([cast, h.make_node("Sub", ["half", "mf"], ["t"]), h.make_node("Mul", ["t", "zero"], ["z"]),
                    h.make_node("Mul", ["dy", "mf"], ["p"]), h.make_node("Add", ["p", "z"], ["dx"])], ins, [vi("dx", T.FLOAT)],
                   [c("zero", 0.0), c("half", 0.5)]),
}
so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False
sess = {k: ort.InferenceSession(g.SerializeToString(), so, providers=["CPUExecutionProvider"]) for k, g in graphs.items()}
# exactness on special values
sp = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38], np.float32)
dy = np.repeat(sp, 2 * len(sp)); mm = np.tile(np.array([True, False]), len(sp) * len(sp))
dy = np.resize(dy, N).reshape(shape); mm = np.resize(mm, N).reshape(shape)
ref = sess["relugrad"].run(None, {"dy": dy, "m": mm})[0]
for k in graphs:
    out = sess[k].run(None, {"dy": dy, "m": mm})[0]
    diff = out.view(np.uint32) != ref.view(np.uint32)
    fin = np.isfinite(dy)
    print(f"{k:10s} bits differ: all {diff.sum()}, finite dY {(diff & fin).sum()}; examples", sorted(set(zip(dy[diff].tolist()[:50], mm[diff].tolist()[:50])))[:6])
rng = np.random.default_rng(0)
dy = rng.standard_normal(shape).astype(np.float32); mm = rng.standard_normal(shape) > 0
ref = sess["relugrad"].run(None, {"dy": dy, "m": mm})[0]
print("random: all equal", {k: bool(np.array_equal(sess[k].run(None, {"dy": dy, "m": mm})[0].view(np.uint32), ref.view(np.uint32))) for k in graphs})
res = {k: ([], []) for k in graphs}
for r in range(21):
    for k in graphs:
        w, cc = time.perf_counter(), time.process_time()
        sess[k].run(None, {"dy": dy, "m": mm})
        res[k][0].append(time.perf_counter() - w); res[k][1].append(time.process_time() - cc)
print("N", N, "load", os.getloadavg(), "threshold", os.environ.get("MALLOC_MMAP_THRESHOLD_"))
for k, (w, cc) in res.items():
    print(f"{k:10s} wall min {min(w)*1e3:7.2f} med {np.median(w)*1e3:7.2f} ms  cpu med {np.median(cc)*1e3:7.2f} ms")
