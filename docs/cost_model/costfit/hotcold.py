"""Calibration ops graph timed with cold (rotated copies, as calibrate does) vs hot (same array) inputs, at
ResNet-18 activation sizes; also with 1 thread. Prints ns/B per op."""
import sys, os, tempfile, statistics
from pathlib import Path
import numpy as np
import onnxruntime as ort
from onnxcomp.runtime import calibrate as C
from onnxcomp.runtime.session import session_options

def run(sizes, hot, threads=None, repeats=6):
    tmp = Path(tempfile.mkdtemp(dir="/tmp/costfit"))
    so = session_options(profile=str(tmp / "ops"))
    so.log_severity_level = 3
    if threads: so.intra_op_num_threads = threads
    sess = ort.InferenceSession(C._ops_graph().SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    res = {}
    for size in sizes:
        x = C.activation(size, 0.5, rng)
        xs = [x] if hot else C.cold_copies(x)
        before = set(tmp.glob("*"))
        for r in range(repeats + 1):
            sess.run(None, {"X": xs[r % len(xs)]})
        res[size] = x.nbytes
    sess.end_profiling()
    ev = C.read_profile(sorted(tmp.glob("ops*.json"))[-1])
    by = {}
    for e in ev:
        by.setdefault(e["node"], []).append(e["dur_s"])
    out = {}
    per = repeats + 1
    for name, d in by.items():
        for i, s in enumerate(sizes):
            out[(name, s)] = statistics.fmean(d[i * per + 1:(i + 1) * per])
    return out, res

sizes = [1 << 20, 3 << 20, 12 << 20]
print("load", os.getloadavg())
import ast
for label, hot, th in ast.literal_eval(sys.argv[1]):
    out, nb = run(sizes, hot, th)
    line = []
    for name in ["Cast", "Cast_back", "Clip", "Mul", "Add", "Slice", "Greater"]:
        line.append(name + " " + "/".join(f"{out[(name, s)]*1e6:.0f}" for s in sizes))
    print(f"{label:8s} us @1/3/12MiB: " + "; ".join(line))
print("load", os.getloadavg())
