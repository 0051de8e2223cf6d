"""policy P without its ChunkedMlpBackwardPass step -> DIR/nomlp-P.onnx (measurement only: not adoptable, the
weight-gradient sums then round differently from main's graphs)."""
import sys, onnx
from onnxcomp.passes import POLICIES, ChunkedMlpBackwardPass
from onnxcomp.transform import transform_model
d, p = sys.argv[1], sys.argv[2]
passes = [x for x in POLICIES[p].build() if not isinstance(x, ChunkedMlpBackwardPass)]
m = onnx.load(f"{d}/training_model.onnx")
r = transform_model(m, p, passes=passes)
onnx.save(r.model, f"{d}/nomlp-{p}.onnx")
print(r.modified_by)
