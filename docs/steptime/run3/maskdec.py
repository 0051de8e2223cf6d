"""Native sign-mask decode feeding Mul(dY, mask): bool LUT + Cast(float) (main) vs a float LUT (one node and one
fresh buffer fewer). Bits of the product compared; CPU, wall and minor faults per run, interleaved.
usage: maskdec.py THREADS N C H W"""
import numpy as np, onnx, onnxruntime as ort, time, os, resource, sys
from onnx import helper as h, TensorProto as T, numpy_helper as nh
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
N = [int(v) for v in sys.argv[2:6]] if len(sys.argv) > 5 else [32, 64, 32, 32]
n = int(np.prod(N)); rows = n // 8
LUT_B = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.bool_)
def model(kind):
    inits = [nh.from_array(LUT_B, "lut_b"), nh.from_array(LUT_B.astype(np.float32), "lut_f"),
             nh.from_array(np.array([rows], np.int64), "flat"), nh.from_array(np.array(N, np.int64), "shape")]
    nodes = [h.make_node("Reshape", ["p", "flat"], ["v"]), h.make_node("Cast", ["v"], ["i"], to=T.INT32)]
    if kind == "bool+cast":
        nodes += [h.make_node("Gather", ["lut_b", "i"], ["g"], axis=0), h.make_node("Reshape", ["g", "shape"], ["m"]),
                  h.make_node("Cast", ["m"], ["mf"], to=T.FLOAT)]
    else:
        nodes += [h.make_node("Gather", ["lut_f", "i"], ["g"], axis=0), h.make_node("Reshape", ["g", "shape"], ["mf"])]
    nodes += [h.make_node("Mul", ["dy", "mf"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("p", T.UINT8, [rows, 1]), h.make_tensor_value_info("dy", T.FLOAT, N)],
                     [h.make_tensor_value_info("y", T.FLOAT, N)], initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False; so.enable_mem_reuse = False
so.intra_op_num_threads = threads; so.log_severity_level = 3
so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
kinds = ["bool+cast", "float-lut"]
S = {k: ort.InferenceSession(model(k).SerializeToString(), so, providers=["CPUExecutionProvider"]) for k in kinds}
rng = np.random.default_rng(0)
ps = [rng.integers(0, 256, (rows, 1), dtype=np.uint8) for _ in range(4)]
dys = [rng.standard_normal(N).astype(np.float32) for _ in range(4)]
dys[0].flat[:6] = [np.inf, -np.inf, np.nan, -0.0, 0.0, -1e-45]
for r in range(4):
    outs = {k: S[k].run(None, {"p": ps[r], "dy": dys[r]})[0] for k in kinds}
    assert np.array_equal(outs[kinds[0]].view(np.uint32), outs[kinds[1]].view(np.uint32)), "bits differ"
print("products bit-identical (4 inputs, incl. inf, nan, -0, subnormal dY)")
res = {k: [] for k in kinds}
for r in range(30):
    for k in (kinds if r % 2 == 0 else kinds[::-1]):
        ru0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter(); c0 = time.process_time()
        S[k].run(None, {"p": ps[r % 4], "dy": dys[r % 4]})
        t1 = time.perf_counter(); c1 = time.process_time(); ru1 = resource.getrusage(resource.RUSAGE_SELF)
        res[k].append((t1 - t0, c1 - c0, ru1.ru_minflt - ru0.ru_minflt))
print("shape", N, "threads", threads, "mmap threshold", os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default"))
for k in kinds:
    a = np.array(res[k]); print(f"{k:10s} wall min/med {a[:,0].min()*1e3:.2f}/{np.median(a[:,0])*1e3:.2f} ms  "
                                f"cpu min/med {a[:,1].min()*1e3:.2f}/{np.median(a[:,1])*1e3:.2f} ms  faults med {np.median(a[:,2]):.0f}")
print("load", os.getloadavg())
