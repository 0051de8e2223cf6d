import time, statistics
import numpy as np, onnx
from onnx import helper, TensorProto
import onnxruntime as ort
from onnxcomp.runtime.calibrate import activation, cold_copies
rng = np.random.default_rng(0)
g = helper.make_graph([helper.make_node("Cast", ["X"], ["h"], to=TensorProto.FLOAT16), helper.make_node("Cast", ["h"], ["Y"], to=TensorProto.FLOAT)],
                      "c", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
so = ort.SessionOptions(); so.enable_cpu_mem_arena = False
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
N = 4 << 20
a = activation(N, 0.5, rng)
gs = rng.standard_normal(a.shape, dtype=np.float32)
for name, x in [("calib activation nz .5", a), ("activation nz .95", activation(N, 0.95, rng)), ("normal", gs), ("normal*1e-3", gs * np.float32(1e-3)),
                ("normal*1e-6", gs * np.float32(1e-6)), ("zeros", np.zeros_like(a)), ("|normal|+1", np.abs(gs) + 1)]:
    sub = float(np.mean((np.abs(x) < 6.1e-5) & (x != 0)))
    xs = cold_copies(x); ts = []
    for r in range(7):
        t0 = time.perf_counter(); s.run(None, {"X": xs[r % len(xs)]}); ts.append(time.perf_counter() - t0)
    print(f"{name:24s} fp16-subnormal share {sub:.2f}  f32->f16->f32 {statistics.median(ts[1:])*1e3:6.2f} ms ({N/2**20:.0f} MiB)")
