import numpy as np, onnx, onnxruntime as ort, time, os, resource, sys
from onnx import helper as h, TensorProto as T, numpy_helper as nh
N = [32, 64, 32, 32]
def model(kind):
    lo32, hi32 = nh.from_array(np.array(-65504, np.float32), "lo"), nh.from_array(np.array(65504, np.float32), "hi")
    lo16, hi16 = nh.from_array(np.array(-65504, np.float16), "lo16"), nh.from_array(np.array(65504, np.float16), "hi16")
    if kind == "clip32":
        nodes = [h.make_node("Clip", ["x", "lo", "hi"], ["c"]), h.make_node("Cast", ["c"], ["y"], to=T.FLOAT16)]
    elif kind == "clip16":
        nodes = [h.make_node("Cast", ["x"], ["c"], to=T.FLOAT16), h.make_node("Clip", ["c", "lo16", "hi16"], ["y"])]
    else:
        nodes = [h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, N)], [h.make_tensor_value_info("y", T.FLOAT16, N)],
                     initializer=[lo32, hi32, lo16, hi16])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False; so.enable_mem_reuse = False
so.intra_op_num_threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
so.log_severity_level = 3
kinds = ["clip32", "clip16", "cast"]
S = {k: ort.InferenceSession(model(k).SerializeToString(), so, providers=["CPUExecutionProvider"]) for k in kinds}
rng = np.random.default_rng(0)
xs = [rng.standard_normal(N).astype(np.float32) * 1e4 for _ in range(4)]
xs[0].flat[:5] = [np.inf, -np.inf, np.nan, 70000, -1e9]
outs = {k: S[k].run(None, {"x": xs[0]})[0] for k in kinds}
print("clip16 == clip32 bits:", np.array_equal(outs["clip16"].view(np.uint16), outs["clip32"].view(np.uint16)))
res = {k: [] for k in kinds}
for r in range(15):
    for k in kinds[r % 3:] + kinds[:r % 3]:
        x = xs[r % 4]
        ru0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter(); c0 = time.process_time()
        S[k].run(None, {"x": x})
        t1 = time.perf_counter(); c1 = time.process_time(); ru1 = resource.getrusage(resource.RUSAGE_SELF)
        res[k].append((t1 - t0, c1 - c0, ru1.ru_minflt - ru0.ru_minflt))
for k in kinds:
    a = np.array(res[k]); print(k, "wall min/med %.2f/%.2f ms" % (a[:,0].min()*1e3, np.median(a[:,0])*1e3), "cpu med %.2f ms" % (np.median(a[:,1])*1e3), "faults med", np.median(a[:,2]))
print("load", os.getloadavg())
