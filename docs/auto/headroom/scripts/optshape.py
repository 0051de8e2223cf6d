"""What shape ORT's optimised graph keeps for the values ORT merged leniently (names from a warncheck log)."""
import re, sys, onnx
from onnxcomp.planner.ort_pattern import ort_optimized_model_of
d, log = sys.argv[1:3]
names = re.findall(r"output\. '([^']+)'", open(log).read())
m = onnx.load(d + "/training_model.onnx")
o = ort_optimized_model_of(m, base_dir=d)
vi = {v.name: v for v in list(o.graph.value_info) + list(o.graph.output)}
for n in names:
    v = vi.get(n)
    tt = v.type.tensor_type if v is not None else None
    print(n, "absent" if v is None else ("NO SHAPE" if not tt.HasField("shape") else [x.dim_value for x in tt.shape.dim]))
