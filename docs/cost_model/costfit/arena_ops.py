"""The calibration's cheap ops timed as *intermediates* (each output consumed by a ReduceSum, so only scalars
leave the graph) vs as graph outputs (calibrate's _ops_graph), with ORT's arena + mem pattern + reuse on and off.
All under MALLOC_MMAP_THRESHOLD_=131072 (set by the caller). Mean us per node over 6 runs."""
import os, sys, tempfile, statistics
from pathlib import Path
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
from onnxcomp.runtime import calibrate as C
from onnxcomp.runtime.session import session_options

def inter_graph():
    g = C._ops_graph()
    outs = [o.name for o in g.graph.output]
    new_out = []
    for o in outs:
        g.graph.node.append(helper.make_node("ReduceSum", [o], [o + "_s"], keepdims=0, name="rs_" + o))
        new_out.append(helper.make_tensor_value_info(o + "_s", TensorProto.FLOAT, None))
    del g.graph.output[:]
    g.graph.output.extend(new_out)
    return g

def run(model, arena, sizes, repeats=6):
    tmp = Path(tempfile.mkdtemp(dir="/tmp/costfit"))
    so = session_options(profile=str(tmp / "ops"), arena=arena, mem_pattern=arena, mem_reuse=arena, execution_order="default" if arena else "priority")
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for s in sizes:
        x = C.activation(s, 0.5, rng); xs = C.cold_copies(x)
        for r in range(repeats + 2):
            sess.run(None, {"X": xs[r % len(xs)]})
    sess.end_profiling()
    ev = C.read_profile(sorted(tmp.glob("ops*.json"))[-1])
    by = {}
    for e in ev: by.setdefault(e["node"], []).append(e["dur_s"])
    per = repeats + 2
    return {(n, s): statistics.fmean(d[i * per + 2:(i + 1) * per]) for n, d in by.items() for i, s in enumerate(sizes)}

sizes = [1 << 20, 3 << 20]
print("load", os.getloadavg(), "MALLOC_MMAP_THRESHOLD_", os.environ.get("MALLOC_MMAP_THRESHOLD_"))
for label, model, arena in [("outputs/no-arena", C._ops_graph(), False), ("outputs/arena", C._ops_graph(), True),
                            ("inter/no-arena", inter_graph(), False), ("inter/arena", inter_graph(), True)]:
    out = run(model, arena, sizes)
    print(f"{label:18s} us @1/3MiB: " + "; ".join(n + " " + "/".join(f"{out[(n, s)]*1e6:.0f}" for s in sizes)
                                                   for n in ["Cast", "Clip", "Mul", "Add", "Slice", "Greater"]))
print("load", os.getloadavg())
