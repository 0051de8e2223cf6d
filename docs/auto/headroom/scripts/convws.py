"""Peak RSS of one Conv run (arena off, MALLOC_MMAP_THRESHOLD_=131072): output + MLAS working buffer."""
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto
def status(k):
    for l in open("/proc/self/status"):
        if l.startswith(k): return int(l.split()[1]) * 1024
n, c, m, h, threads = map(int, sys.argv[1:6])
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, h])
w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [m, c, 3, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, h, h])
g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g", [x, w], [y])
mod = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); mod.ir_version = 8
so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.enable_cpu_mem_arena = False; so.enable_mem_pattern = False
s = ort.InferenceSession(mod.SerializeToString(), so, providers=["CPUExecutionProvider"])
feeds = {"x": np.random.rand(n, c, h, h).astype(np.float32), "w": np.random.rand(m, c, 3, 3).astype(np.float32)}
s.run(None, feeds)
M = 2**20
r0 = status("VmRSS"); open("/proc/self/clear_refs", "w").write("5")
out = s.run(None, feeds)
peak = status("VmHWM") - r0
outb = n * m * h * h * 4; im2col = c * 9 * h * h * 4
print(f"N={n} C={c} M={m} {h}x{h} threads={threads}: step peak {peak/M:.2f} MiB, output {outb/M:.2f}, one-image im2col {im2col/M:.2f} -> scratch ~{(peak-outb)/M:.2f} MiB")
