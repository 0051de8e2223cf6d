"""Per-mapping Rss growth (anon) from set-up to after step 2, ORT defaults. Usage: maps.py DIR"""
import ctypes, json, sys, re
from pathlib import Path
from onnxcomp.runtime.proc_memory import reset_hwm, status_bytes, trim_heap
def maps():
    out = {}; cur=None
    for line in open("/proc/self/smaps"):
        p = line.split()
        if "-" in p[0] and ":" not in p[0] and len(p) >= 5:
            a,b = (int(x,16) for x in p[0].split("-")); name = p[5] if len(p) > 5 else ""
            cur = (a,b,name); out[cur] = 0
        elif p[0] == "Rss:":
            out[cur] = int(p[1])*1024
    return out
d = Path(sys.argv[1]); model = d / "training_model.onnx"
import onnxruntime as ort
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime._measure_worker import _load_codec_kernels
ort.set_default_logger_severity(3)
st = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
s = open_artifact_session(d, model, settings=st, seed=0, bounds={})
spec = graph_data(d, model, list(s.module.input_names()))
gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
batches = [next(gen) for _ in range(3)]
_load_codec_kernels(model)
trim_heap(); m0 = maps()
for x, y in batches:
    trim_heap(); s.step(x, y)
m1 = maps()
M=2**20
rows=[]
for k,v in m1.items():
    a,b,name=k
    old = m0.get(k)
    if old is None:
        # maybe a grown/split mapping: sum old Rss over overlapping
        old = sum(r for (a0,b0,n0),r in m0.items() if a0 < b and b0 > a)
    if v - old > 16384 or old - v > 16384:
        rows.append((v-old, (b-a), name, hex(a), old))
rows.sort(reverse=True)
for dv,size,name,a,old in rows[:25]:
    print(f"{dv/M:7.2f} MiB  size {size/M:8.2f} MiB {name[-40:]:40s} {a} old {old/M:.2f}")
print("total", sum(r[0] for r in rows)/M)
