"""Rate histogram of the sz encodes in 3 comet steps, and the encoder inputs of the first step saved to
/tmp/cometstep/acts.npz for micro.py. usage: dump_acts.py DIR GRAPH"""
import sys, numpy as np, collections
from pathlib import Path
d = Path(sys.argv[1]); g = sys.argv[2]
import onnxruntime as ort
ort.set_default_logger_severity(3)
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.custom_ops import cpu
cpu.warm_up()
k = cpu.kernels("sz")
hist = np.zeros(33, np.int64); dumps = []
f = k.encode_blocks
def enc(flat, eb):
    r = f(flat, eb)
    hist[:] += np.bincount(r[0], minlength=33)[:33]
    if len(dumps) < 17: dumps.append((flat.copy(), eb))
    return r
k.encode_blocks = enc
s = open_artifact_session(d, d / g, settings=RuntimeSettings(intra_threads=1), seed=0)
spec = graph_data(d, d / g, list(s.module.input_names()))
b = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
for i in range(3):
    x, y = next(b); s.step(x, y)
print("rate histogram (3 steps):", {i: int(v) for i, v in enumerate(hist) if v})
tot = hist.sum(); print("frac r<=8:", hist[:9].sum() / tot, "r 9..16:", hist[9:17].sum() / tot, "r>16:", hist[17:].sum() / tot)
np.savez("/tmp/cometstep/acts.npz", *[a for a, _ in dumps], ebs=np.array([e for _, e in dumps]))
print([a.size for a, _ in dumps])
