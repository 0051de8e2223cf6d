"""The planner's growth prediction (reorder, spacers) of written plans, with whichever code PYTHONPATH names."""
import sys, onnx
from onnxcomp.planner.ort_growth import predict_growth_of
M = 2**20
for d in sys.argv[1:]:
    m = onnx.load(d + "/training_model.onnx")
    p = predict_growth_of(m, reorder=True, spacers=True)
    print(f"{d}: growth {p.total/M:.2f} P {p.pattern/M:.2f}x{p.pattern_copies}", flush=True)
