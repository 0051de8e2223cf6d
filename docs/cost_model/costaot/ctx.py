"""Does an AOT codec PyOp (dpr_fp8 / sz, 1 MiB) run slower behind a parallel ORT op (a Conv: ORT's intra-op
pool busy, then spinning) than alone (how calibrate times it), spinning on / off? ORT's profiler times the
encoder and decoder; sessions interleaved. Scratch (costaot), adapted from tools/codec_context_check.py."""
import tempfile, statistics, numpy as np, onnxruntime as ort, os, json, sys
from pathlib import Path
from onnx import helper, TensorProto, numpy_helper
from onnxcomp.runtime import calibrate as C
from onnxcomp.runtime.session import session_options
from onnxcomp.custom_ops import contract, cpu
cpu.warm_up()
ort.set_default_logger_severity(3)
C_, H = 64, 16   # 32x64x16x16 float32 = 2 MiB: ResNet-18 layer1's activations at batch 32, 64x64
def graph(codec, params, pre):
    attr = contract.params_value({**params, "tensor": "t"})
    from onnxcomp.custom_ops import get_codec
    n = len(get_codec(codec).payload_names)
    nodes, inits = [], []
    src = "X"
    if pre:
        w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((C_, C_, 3, 3)).astype(np.float32) * 0.05, "W")
        inits.append(w)
        nodes.append(helper.make_node("Conv", ["X", "W"], ["Y"], pads=[1, 1, 1, 1], name="pre"))
        nodes.append(helper.make_node("Relu", ["Y"], ["R"], name="pre_relu")); src = "R"
    pay = [f"p{i}" for i in range(n)]
    nodes.append(helper.make_node(contract.encode_op(codec), [src], [*pay, "anchor"], name="encode", domain=contract.DOMAIN, params=attr))
    nodes.append(helper.make_node(contract.decode_op(codec), [*pay, "trig"], ["Z"], name="decode", domain=contract.DOMAIN, params=attr))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None),
                                       helper.make_tensor_value_info("trig", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None), helper.make_tensor_value_info("anchor", TensorProto.INT64, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(contract.DOMAIN, 1)], ir_version=8)
rng = np.random.default_rng(0)
x = np.maximum(rng.standard_normal((32, C_, H, H), dtype=np.float32), 0)  # relu-like, 2 MiB
xs = C.cold_copies(x)
trig = np.zeros(1, np.float32)
out = {}
with tempfile.TemporaryDirectory() as d:
    sess = {}
    for codec, params in (("dpr_fp8", {}), ("sz", {"eb": 1e-2})):
        for pre in (False, True):
            for spin in ("1", "0"):
                pd = Path(d) / f"{codec}{pre}{spin}"; pd.mkdir()
                so = session_options(profile=str(pd / "x"))
                so.add_session_config_entry("session.intra_op.allow_spinning", spin)
                sess[(codec, pre, spin)] = (ort.InferenceSession(graph(codec, params, pre).SerializeToString(), so, providers=["CPUExecutionProvider"]), pd)
    for r in range(14):
        for k, (s, _) in sess.items():
            s.run(None, {"X": xs[r % len(xs)], "trig": trig})
    for k, (s, pd) in sess.items():
        s.end_profiling()
        ev = C.read_profile(next(pd.glob("*.json")))
        row = {}
        for node in ("encode", "decode", "pre"):
            t = [e["dur_s"] for e in ev if e["node"] == node][2:]
            if t:
                row[node] = (statistics.median(t) * 1e3, min(t) * 1e3)
        out["|".join(map(str, k))] = row
        print(k, " ".join(f"{n} med {a:.2f} min {b:.2f} ms" for n, (a, b) in row.items()), "load", os.getloadavg()[0], flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
