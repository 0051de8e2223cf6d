"""ORT 1.19.2 Cast time vs the input's value pattern (what makes float32<->float16 data dependent)."""
import sys, time, statistics, os, json
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
sys.path.insert(0, "/work/wt/costquiet")
from onnxcomp.runtime.calibrate import activation, pre_activation

def graph(src, dst):
    n = helper.make_node("Cast", ["X"], ["Y"], to=dst)
    g = helper.make_graph([n], "c", [helper.make_tensor_value_info("X", src, None)],
                          [helper.make_tensor_value_info("Y", dst, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()

so = ort.SessionOptions(); so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False
so.log_severity_level = 3
S = {k: ort.InferenceSession(graph(*v), so, providers=["CPUExecutionProvider"]) for k, v in {
    "f2h": (TensorProto.FLOAT, TensorProto.FLOAT16), "h2f": (TensorProto.FLOAT16, TensorProto.FLOAT),
    "f2bf": (TensorProto.FLOAT, TensorProto.BFLOAT16)}.items()}
rng = np.random.default_rng(0)

def markov(n, z, run):  # zero-mask with stationary fraction z, mean zero-run length `run`
    p10 = 1.0 / run                      # leave zero run
    p01 = p10 * z / (1 - z)              # enter zero run
    m = np.empty(n, bool); s = rng.random() < z; u = rng.random(n)
    # vectorised-ish: draw run lengths
    out = []; tot = 0
    while tot < n:
        if s: L = rng.geometric(p10)
        else: L = rng.geometric(min(p01, 1.0))
        out.append((s, L)); tot += L; s = not s
    m = np.concatenate([np.full(L, s) for s, L in out])[:n]
    return m

def inputs(n):
    g = rng.standard_normal(n).astype(np.float32)
    d = {"dense N(0,1)": g, "zeros": np.zeros(n, np.float32)}
    for z in (0.05, 0.25, 0.5, 0.75, 0.95):
        d[f"iid zeros z={z}"] = np.where(rng.random(n) < z, 0, np.abs(g) + 0.1).astype(np.float32)
    d["iid tiny(1e-6) z=0.5"] = np.where(rng.random(n) < 0.5, 1e-6, np.abs(g) + 0.1).astype(np.float32)
    d["iid sign z=0.5 (no zeros)"] = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32) * (np.abs(g) + .1)
    for run in (4, 32, 256):
        d[f"runs z=0.5 len={run}"] = np.where(markov(n, 0.5, run), 0, np.abs(g) + 0.1).astype(np.float32)
    d["calib ReLU field nz=0.5"] = activation(n * 4, 0.5, rng).reshape(-1)[:n]
    d["calib ReLU field nz=0.9"] = activation(n * 4, 0.9, rng).reshape(-1)[:n]
    d["pre_activation"] = pre_activation(n * 4, rng).reshape(-1)[:n]
    return d

def t(sess, x, reps=7):
    xs = [x.copy() for _ in range(4)]
    sess.run(None, {"X": xs[0]})
    ts = []
    for r in range(reps):
        a = time.perf_counter(); sess.run(None, {"X": xs[r % 4]}); ts.append(time.perf_counter() - a)
    return statistics.median(ts)

res = []
print("load", os.getloadavg(), "cpu0", time.process_time())
for n in (1 << 20, 1 << 22):
    for name, x in inputs(n).items():
        x = np.ascontiguousarray(x)
        small = float(np.mean(np.abs(x) < 2 ** -14))
        cls = np.abs(x) < 2 ** -14
        sw = float(np.mean(cls[1:] != cls[:-1]))
        h = x.astype(np.float16)
        r = {"n": n, "data": name, "small": round(small, 3), "switch": round(sw, 3),
             "f2h_ns_per_elem": t(S["f2h"], x) / n * 1e9, "h2f": t(S["h2f"], h) / n * 1e9}
        res.append(r)
        print(f"{n:>8} {name:28s} small {small:.3f} switch {sw:.3f}  f2h {r['f2h_ns_per_elem']:.2f}  h2f {r['h2f']:.2f} ns/elem", flush=True)
print("load", os.getloadavg(), "cpu", time.process_time())
json.dump(res, open(sys.argv[1], "w"), indent=1)
