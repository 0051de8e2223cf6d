"""Codec op time (ORT profiler) in calibration's encode->decode graph vs the same ops placed after a parallel ORT op
(X -> Mul -> encode), as inside a training step. usage: ctx.py CODEC..."""
import sys, tempfile, statistics
from pathlib import Path
import numpy as np, onnx
from onnx import helper, TensorProto
import onnxruntime as ort
from onnxcomp.custom_ops import get_codec, cpu
from onnxcomp.runtime.calibrate import _codec_graph, codec_input, cold_copies, read_profile, _new_profiles, CODEC_PARAMS
from onnxcomp.runtime.session import session_options
cpu.warm_up()
rng = np.random.default_rng(0)
def variant(m, pre):
    g = m.graph
    if pre == "none":
        return m
    enc = g.node[0]
    enc.input[0] = "Xp"
    if pre == "mul":
        n = helper.make_node("Mul", ["X", "X"], ["Xp"], name="pre")
    elif pre == "conv":  # a small parallel conv feeding a Relu-like op chain is heavier; use MatMul on a reshaped X
        n = helper.make_node("Mul", ["X", "X"], ["Xq"], name="pre0")
        g.node.insert(0, n)
        n = helper.make_node("Sqrt", ["Xq"], ["Xp"], name="pre")
    g.node.insert(0, n)
    return m
for codec in sys.argv[1:]:
    c = get_codec(codec)
    for pre in ("none", "mul", "none", "mul", "conv"):
        x, params = codec_input(codec, 4 << 20, 0.5, rng)
        if c.input_dtype != "float32":
            continue
        with tempfile.TemporaryDirectory() as tmp:
            so = session_options(profile=str(Path(tmp) / "p")); so.log_severity_level = 3
            sess = ort.InferenceSession(variant(_codec_graph(codec, params), pre).SerializeToString(), so, providers=["CPUExecutionProvider"])
            xs = cold_copies(x); trig = np.zeros(1, np.float32)
            for r in range(9):
                sess.run(None, {"X": xs[r % len(xs)], "trigger": trig})
            sess.end_profiling(); del sess
            ev = read_profile(_new_profiles(Path(tmp), set())[-1])
        e = [v["dur_s"] for v in ev if v["node"] == "encode"][1:]; d = [v["dur_s"] for v in ev if v["node"] == "decode"][1:]
        p = [v["dur_s"] for v in ev if v["node"] == "pre"][1:]
        print(f"{codec:9s} pre={pre:5s} enc {statistics.fmean(e)*1e3:6.2f} ms dec {statistics.fmean(d)*1e3:6.2f} ms pre-op {statistics.fmean(p)*1e3 if p else 0:5.2f} ms", flush=True)
