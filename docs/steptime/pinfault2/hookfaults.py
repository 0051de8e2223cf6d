"""Minor faults per step inside onnxcomp's PyOp hook (Python side: codec temporaries, payload arrays, frames),
by op type, split into op.body vs _pack; plus the step total. Usage: DIR GRAPH [steps]"""
import sys, resource, collections, time
from pathlib import Path
import numpy as np
from onnxcomp.runtime import pyops
from onnxruntime_extensions import PyCustomOpDef, Opdef

acc = collections.defaultdict(lambda: [0, 0, 0, 0.0, 0, 0])  # calls, body faults, pack faults, seconds
def flt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
orig_pack = pyops._pack
def hook(k_id, feed, attributes):
    op = Opdef._odlist.get(k_id)
    a = acc[op.op_type]
    f0 = flt(); t0 = time.perf_counter()
    attrs = op.cast_attributes(attributes)
    rv = op.body(*feed, **attrs)
    f1 = flt()
    r = orig_pack(k_id, op, rv)
    f2 = flt()
    big = lambda v: v.nbytes if v.nbytes >= 131072 else 0
    a[4] += sum(big(np.asarray(v)) for v in feed)
    a[5] += sum(big(np.asarray(v)) for v in (rv if isinstance(rv, tuple) else (rv,)))
    a[0] += 1; a[1] += f1 - f0; a[2] += f2 - f1; a[3] += time.perf_counter() - t0
    return r
pyops.install_fast_hook()
PyCustomOpDef.install_hooker(hook)

from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime.data import graph_data, synthetic_batches
d = Path(sys.argv[1]); g = d / sys.argv[2]; steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
s = open_artifact_session(d, g, settings=RuntimeSettings())
spec = graph_data(d, g, list(s.module.input_names()))
b = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
import os
for i in range(steps + 1):
    if i == 1 and os.environ.get("SLAB"):
        sys.path.insert(0, "/tmp/pinfault/s")
        import bench_slab
        bench_slab.install_shim(); bench_slab.SHIM.on = True
    acc.clear()
    x, y = next(b)
    f0 = flt()
    s.step(x, y)
    tot = flt() - f0
print(f"{sys.argv[2]}: step faults {tot}")
hb = hp = 0
for k, (c, fb, fp, t, bi, bo) in sorted(acc.items()):
    print(f"  {k:36s} calls {c:3d}  body {fb:7d}  pack {fp:5d}  {t*1e3:7.1f} ms  bridge-in {bi/4096:7.0f} pages  out {bo/4096:7.0f} pages")
    hb += fb; hp += fp
print(f"  in hook: body {hb}, pack {hp}, outside hook {tot - hb - hp}")
