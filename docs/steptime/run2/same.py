"""Train graphs A and B a few steps on the same batches; compare losses and parameters bit for bit.
usage: same.py DIR A.onnx B.onnx [steps]"""
import sys, numpy as np, onnxruntime as ort
from pathlib import Path
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.training_session import open_artifact_session, loss_value
d, a, b = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 4
res = {}
for g in (a, b):
    s = open_artifact_session(d, d / g)
    spec = graph_data(d, d / g, list(s.module.input_names()))
    batches = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    ort.set_seed(0)
    losses = [loss_value(s.step(*next(batches))) for _ in range(steps)]
    res[g] = (np.array(losses, np.float32), s.module.get_contiguous_parameters().numpy().copy())
(la, pa), (lb, pb) = res[a], res[b]
print("losses", la.tolist(), lb.tolist())
print("losses bit-identical:", np.array_equal(la.view(np.uint32), lb.view(np.uint32)),
      "| params bit-identical:", np.array_equal(pa.view(np.uint32), pb.view(np.uint32)),
      "| params differing:", int((pa.view(np.uint32) != pb.view(np.uint32)).sum()), "of", pa.size,
      "| max |diff|", float(np.abs(pa - pb).max()))
