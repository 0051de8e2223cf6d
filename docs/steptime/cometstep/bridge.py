"""One sz decode / encode op in an InferenceSession vs the op's Python function vs the kernel, on a real
2 MiB activation (acts.npz[0]); CPU medians."""
import sys, time, statistics, os, json
import numpy as np
from onnx import TensorProto, helper
import onnxruntime as ort
from onnxcomp.custom_ops import get_codec, cpu, contract
from onnxcomp.runtime import codec_ops, session_options
cpu.warm_up(["sz"])
sz = get_codec("sz")
z = np.load("/tmp/cometstep/acts.npz"); x = z["arr_0"]
n = x.size
attrs = {contract.PARAMS_ATTR: json.dumps({"eb": 1e-3, "key": "k", "weight": "w", "batch": 32, "adaptive": True, "tensor": "t"})}
enc_t, dec_t = codec_ops.op_type_names("sz")
f = helper.make_tensor_value_info
def sess(node, ins, outs):
    g = helper.make_graph([node], "g", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)])
    m.ir_version = 8
    so = session_options(); so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
names = list(sz.payload_names)
types = [getattr(TensorProto, d.upper()) for d in sz.payload_dtypes]
enc = sess(helper.make_node(enc_t, ["X"], names + ["anchor"], domain="ai.onnx.contrib", **attrs),
           [f("X", TensorProto.FLOAT, [n])], [f(nm, t, None) for nm, t in zip(names, types)] + [f("anchor", TensorProto.INT64, None)])
dec = sess(helper.make_node(dec_t, names + ["trigger"], ["Y"], domain="ai.onnx.contrib", **attrs),
           [f(nm, t, None) for nm, t in zip(names, types)] + [f("trigger", TensorProto.FLOAT, [1])], [f("Y", TensorProto.FLOAT, None)])
encf, decf = codec_ops._make_encode(sz), codec_ops._make_decode(sz)
framed = encf(x, **attrs)
feed = dict(zip(names, framed[:6])); feed["trigger"] = np.ones(1, np.float32)
k = cpu.kernels("sz"); pl = sz.encode_cpu(x, eb=1e-3)
def med(fn, reps=60):
    fn(); c = []; w = []
    for _ in range(reps):
        a, b = time.process_time(), time.perf_counter(); fn(); c.append(time.process_time() - a); w.append(time.perf_counter() - b)
    return statistics.median(c) * 1e3, statistics.median(w) * 1e3
rows = {"enc op": lambda: enc.run(None, {"X": x}), "enc fn": lambda: encf(x.copy(), **attrs),
        "enc kernel": lambda: k.encode_blocks(x, 1e-3), "x.copy": lambda: x.copy(),
        "dec op": lambda: dec.run(None, feed), "dec fn": lambda: decf(*framed[:6], feed["trigger"], **attrs),
        "dec codec": lambda: sz.decode_cpu(pl), "dec kernel": lambda: k.decode_blocks(pl[1], pl[2], n, 1e-3),
        "y copy": lambda: np.empty(n, np.float32).__setitem__(slice(None), x)}
for r in range(2):
    for name, fn in rows.items():
        c, w = med(fn)
        print(f"{name:12s} CPU {c:6.3f} ms  wall {w:6.3f} ms")
print("load", os.getloadavg(), "MALLOC_MMAP_THRESHOLD_", os.environ.get("MALLOC_MMAP_THRESHOLD_"))
