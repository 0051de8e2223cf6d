"""Interleaved micro-benchmark of encode/decode variants on an 8 MiB ReLU-output-like tensor (cold inputs)."""
import sys, time, statistics, numpy as np
sys.path.insert(0, "/work/wt-steptime")
import onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
from onnxcomp.runtime import session_options
from onnxcomp.runtime.codec_ops import PARAMS_ATTR, op_type_names
N = [32, 64, 32, 32]; n = int(np.prod(N)); M = n // 8
def sess(nodes, ins, outs, inits=()):
    g = h.make_graph(nodes, "g", ins, outs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.contrib", 1)]); m.ir_version = 8
    return ort.InferenceSession(m.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])
vi = h.make_tensor_value_info
lo = nh.from_array(np.array(-65504.0, np.float32), "lo"); hi = nh.from_array(np.array(65504.0, np.float32), "hi")
zero = nh.from_array(np.array(0.0, np.float32), "zero")
mshape = nh.from_array(np.array([M, 8], np.int64), "mshape")
w = nh.from_array((1 << np.arange(8, dtype=np.uint8)).reshape(8, 1), "w")
sh = nh.from_array((7 - np.arange(8, dtype=np.uint8)).reshape(1, 8), "sh")
seven = nh.from_array(np.array(7, np.uint8), "seven")
fshape = nh.from_array(np.array(N, np.int64), "fshape")
e16, d16 = op_type_names("dpr_fp16"); erm, drm = op_type_names("relumask"); ebm, dbm = op_type_names("bitmask")
S = {}
S["enc native clip+cast"] = sess([h.make_node("Clip", ["x", "lo", "hi"], ["c"]), h.make_node("Cast", ["c"], ["y"], to=T.FLOAT16)],
                            [vi("x", T.FLOAT, N)], [vi("y", T.FLOAT16, N)], [lo, hi])
S["enc native cast only"] = sess([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16)], [vi("x", T.FLOAT, N)], [vi("y", T.FLOAT16, N)])
S["enc pyop dpr_fp16"] = sess([h.make_node(e16, ["x"], ["p", "s", "a"], domain="ai.onnx.contrib", **{PARAMS_ATTR: "{}"})],
                         [vi("x", T.FLOAT, N)], [vi("p", T.UINT16, None), vi("s", T.INT64, None), vi("a", T.INT64, None)])
S["dec native cast"] = sess([h.make_node("Cast", ["p"], ["y"], to=T.FLOAT)], [vi("p", T.FLOAT16, N)], [vi("y", T.FLOAT, N)])
S["enc pyop relumask"] = sess([h.make_node(erm, ["x"], ["p", "s", "a"], domain="ai.onnx.contrib", **{PARAMS_ATTR: "{}"})],
                         [vi("x", T.FLOAT, N)], [vi("p", T.UINT8, None), vi("s", T.INT64, None), vi("a", T.INT64, None)])
S["enc greater + pyop bitmask"] = sess([h.make_node("Greater", ["x", "zero"], ["g"]),
                           h.make_node(ebm, ["g"], ["p", "s", "a"], domain="ai.onnx.contrib", **{PARAMS_ATTR: "{}"})],
                         [vi("x", T.FLOAT, N)], [vi("p", T.UINT8, None), vi("s", T.INT64, None), vi("a", T.INT64, None)], [zero])
S["enc native bitpack"] = sess([h.make_node("Greater", ["x", "zero"], ["g"]), h.make_node("Cast", ["g"], ["u"], to=T.UINT8),
                           h.make_node("Reshape", ["u", "mshape"], ["r"]), h.make_node("MatMulInteger", ["r", "w"], ["i"]),
                           h.make_node("Cast", ["i"], ["y"], to=T.UINT8)],
                          [vi("x", T.FLOAT, N)], [vi("y", T.UINT8, [M, 1])], [zero, mshape, w])
S["dec native bitunpack->float"] = sess([h.make_node("BitShift", ["p", "sh"], ["l"], direction="LEFT"),
                                    h.make_node("BitShift", ["l", "seven"], ["b"], direction="RIGHT"),
                                    h.make_node("Reshape", ["b", "fshape"], ["r"]), h.make_node("Cast", ["r"], ["y"], to=T.FLOAT)],
                                   [vi("p", T.UINT8, [M, 1])], [vi("y", T.FLOAT, N)], [sh, seven, fshape])
rng = np.random.default_rng(0)
xs = [np.maximum(rng.standard_normal(N).astype(np.float32), 0) for _ in range(6)]
x16 = [x.astype(np.float16) for x in xs]
enc_rm = S["enc pyop relumask"].run(None, {"x": xs[0]})
dec_in_rm = [enc_rm[0], enc_rm[1]]
S["dec pyop relumask->float"] = sess([h.make_node(drm, ["p", "s", "t"], ["m"], domain="ai.onnx.contrib", **{PARAMS_ATTR: "{}"}),
                                 h.make_node("Cast", ["m"], ["y"], to=T.FLOAT)],
                                [vi("p", T.UINT8, None), vi("s", T.INT64, None), vi("t", T.FLOAT, None)], [vi("y", T.FLOAT, N)])
enc16 = S["enc pyop dpr_fp16"].run(None, {"x": xs[0]})
S["dec pyop dpr_fp16"] = sess([h.make_node(d16, ["p", "s", "t"], ["y"], domain="ai.onnx.contrib", **{PARAMS_ATTR: "{}"})],
                         [vi("p", T.UINT16, None), vi("s", T.INT64, None), vi("t", T.FLOAT, None)], [vi("y", T.FLOAT, N)])
a1 = S["enc pyop relumask"].run(None, {"x": xs[1]}); a2 = S["enc greater + pyop bitmask"].run(None, {"x": xs[1]})
print("cmp", [(u.shape, v.shape, np.array_equal(u, v), np.flatnonzero(u.reshape(-1) != v.reshape(-1))[:5] if u.shape == v.shape else None) for u, v in zip(a1, a2)])
packed = S["enc native bitpack"].run(None, {"x": xs[0]})[0]
unpacked = S["dec native bitunpack->float"].run(None, {"p": packed})[0]
assert np.array_equal(unpacked, (xs[0] > 0).astype(np.float32)), "bitpack roundtrip"
assert np.array_equal(packed.reshape(-1), np.packbits(xs[0].reshape(-1) > 0, bitorder="little")), "bit order"
feeds = {
 "enc native clip+cast": lambda i: {"x": xs[i]}, "enc native cast only": lambda i: {"x": xs[i]},
 "enc pyop dpr_fp16": lambda i: {"x": xs[i]}, "dec native cast": lambda i: {"p": x16[i]},
 "enc pyop relumask": lambda i: {"x": xs[i]}, "enc greater + pyop bitmask": lambda i: {"x": xs[i]}, "enc native bitpack": lambda i: {"x": xs[i]},
 "dec native bitunpack->float": lambda i: {"p": packed}, "dec pyop relumask->float": lambda i: {"p": dec_in_rm[0], "s": dec_in_rm[1], "t": np.zeros(1, np.float32)},
 "dec pyop dpr_fp16": lambda i: {"p": enc16[0], "s": enc16[1], "t": np.zeros(1, np.float32)},
}
T_ = {k: [] for k in S}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 12):
    for k, s in S.items():
        if len(sys.argv) > 2 and sys.argv[2] not in k: continue
        f = feeds[k](r % 6); t = time.perf_counter(); s.run(None, f); T_[k].append(time.perf_counter() - t)
for k, v in T_.items():
    v = v[2:]
    if not v: continue
    print(f"{k:32s} median {1e3*statistics.median(v):7.2f} ms  min {1e3*min(v):7.2f} ms")
