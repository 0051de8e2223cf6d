"""policy P without its ChunkedBackwardPass step -> DIR/nc-P.onnx"""
import sys, onnx
from onnxcomp.passes import POLICIES, ChunkedBackwardPass
from onnxcomp.transform import transform_model
p = sys.argv[1]
passes = [x for x in POLICIES[p].build() if not isinstance(x, ChunkedBackwardPass)]
m = onnx.load("/tmp/steptime/resnet18/training_model.onnx")
r = transform_model(m, p, passes=passes)
onnx.save(r.model, f"/tmp/steptime/resnet18/nc-{p}.onnx")
print(r.modified_by)
