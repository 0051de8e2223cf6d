"""Run DIR GRAPH: warm-up + 1 step, one thread, ORT profiling on, monotonic anchors at every PyOp hook entry and
the measured step's window -> OUT.json (+ ORT profile). Run under perf record -k CLOCK_MONOTONIC -e page-faults."""
import sys, time, json, glob, os
from pathlib import Path
d, g, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
import onnxruntime as ort
ort.set_default_logger_severity(3)
from onnxcomp.runtime import pyops
from onnxruntime_extensions import Opdef, PyCustomOpDef
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime.data import graph_data, synthetic_batches
anchors = []
def hook(k_id, feed, attributes):
    anchors.append((time.monotonic_ns() / 1e3, Opdef._odlist.get(k_id).op_type))
    return pyops._fast_hook(k_id, feed, attributes)
pyops.install_fast_hook(); PyCustomOpDef.install_hooker(hook)
pdir = out.parent / (out.stem + "_prof"); pdir.mkdir(exist_ok=True)
for p in pdir.glob("*.json"): p.unlink()
s = open_artifact_session(d, d / g, settings=RuntimeSettings(intra_threads=1, profile=str(pdir / "p")), seed=0)
spec = graph_data(d, d / g, list(s.module.input_names()))
b = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
x, y = next(b); s.step(x, y)
anchors.clear()
x, y = next(b)
t0 = time.monotonic_ns() / 1e3; s.step(x, y); t1 = time.monotonic_ns() / 1e3
s.close()
json.dump({"t0": t0, "t1": t1, "anchors": anchors, "profiles": sorted(str(p) for p in pdir.glob("*.json"))}, open(out, "w"))
print("step us", t1 - t0, "anchors", len(anchors))
