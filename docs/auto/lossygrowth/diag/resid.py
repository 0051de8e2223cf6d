"""Residency (mincore) of the step-0 arena region vs the replay's touched offsets. Usage: resid.py DIR"""
import ctypes, sys, os, json
from pathlib import Path
import numpy as np
from onnxcomp.runtime.proc_memory import trim_heap
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
def anon_maps():
    out=[]
    for line in open("/proc/self/maps"):
        p=line.split()
        if len(p) < 6:
            a,b=(int(x,16) for x in p[0].split("-")); out.append((a,b))
    return out
def resident(a,b):
    n=(b-a)//4096; vec=ctypes.create_string_buffer(n)
    if libc.mincore(ctypes.c_void_p(a), b-a, vec) != 0: return None
    return np.frombuffer(vec.raw, dtype=np.uint8) & 1
d = Path(sys.argv[1]); model = d / "training_model.onnx"
import onnxruntime as ort
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime._measure_worker import _load_codec_kernels
ort.set_default_logger_severity(0 if os.environ.get("ORT_LOG") else 3)
st = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
s = open_artifact_session(d, model, settings=st, seed=0, bounds={})
spec = graph_data(d, model, list(s.module.input_names()))
gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
batches = [next(gen) for _ in range(3)]
_load_codec_kernels(model)
trim_heap()
before = {m: resident(*m) for m in anon_maps()}
for i,(x, y) in enumerate(batches):
    trim_heap(); print(f"STEP {i}", file=sys.stderr, flush=True); s.step(x, y)
M=2**20
print("END", file=sys.stderr, flush=True)
regs=[]
import re
res = []
for m in anon_maps():
    r = resident(*m)
    if r is None: continue
    r0 = before.get(m)
    new = int(r.sum()) - (int(r0.sum()) if r0 is not None else 0)
    if new*4096 > 256*1024:
        res.append((m, r, r0))
        print(f"map {hex(m[0])} size {(m[1]-m[0])/M:.2f} MiB resident {r.sum()*4096/M:.2f} (was {0 if r0 is None else r0.sum()*4096/M:.2f})")
np.save("/tmp/lossygrowth/diag/resid_maps.npy", np.array([(m[0], m[1]) for m, _, _ in res]))
for i,(m,r,r0) in enumerate(res):
    np.save(f"/tmp/lossygrowth/diag/resid_{i}.npy", r)

log = open(os.environ["ORT_LOGFILE"]).read() if os.environ.get("ORT_LOGFILE") else ""
