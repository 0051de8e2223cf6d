"""Does a codec PyOp run slower right after a parallel ORT op, or with ORT's thread-pool spinning on?

One 2 MiB cold ReLU-like activation, a relumask encoder alone or behind a Relu, session option
``session.intra_op.allow_spinning`` 1 or 0; the four sessions run interleaved and ORT's profiler times the
encoder. Used in docs/cost-model.md ("known misses"); run under the timing lock with measure's allocator pin:

    MALLOC_MMAP_THRESHOLD_=131072 flock /tmp/onnxcomp-timing.lock .venv/bin/python tools/codec_context_check.py
"""
import tempfile, statistics, numpy as np, onnxruntime as ort, os
from pathlib import Path
from onnx import helper, TensorProto
from onnxcomp.runtime import calibrate as C
from onnxcomp.runtime.session import session_options
from onnxcomp.custom_ops import contract, cpu
cpu.warm_up()
ort.set_default_logger_severity(3)
def graph(pre):
    attr = contract.params_value({"tensor": "t"})
    nodes = []; src = "X"
    if pre:
        nodes.append(helper.make_node("Relu", ["X"], ["R"], name="pre")); src = "R"
    nodes.append(helper.make_node(contract.encode_op("relumask"), [src], ["b", "s", "a"], name="encode", domain=contract.DOMAIN, params=attr))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("b", TensorProto.UINT8, None), helper.make_tensor_value_info("a", TensorProto.INT64, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(contract.DOMAIN, 1)], ir_version=8)
x = C.activation(2 << 20, 0.5, np.random.default_rng(0)); xs = C.cold_copies(x)
res = {}
with tempfile.TemporaryDirectory() as d:
    sess = {}
    for pre in (False, True):
        for spin in ("1", "0"):
            pd = Path(d) / f"p{pre}{spin}"; pd.mkdir()
            so = session_options(profile=str(pd / "x"))
            so.add_session_config_entry("session.intra_op.allow_spinning", spin)
            sess[(pre, spin)] = (ort.InferenceSession(graph(pre).SerializeToString(), so, providers=["CPUExecutionProvider"]), pd)
    for r in range(12):
        for k, (s, _) in sess.items():
            s.run(None, {"X": xs[r % len(xs)]})
    for k, (s, pd) in sess.items():
        s.end_profiling()
        ev = C.read_profile(next(pd.glob("*.json")))
        enc = [e["dur_s"] for e in ev if e["node"] == "encode"][2:]
        print("pre-op", k[0], "spinning", k[1], "encode ms median %.2f min %.2f" % (statistics.median(enc)*1e3, min(enc)*1e3), "load", os.getloadavg()[0])
