import sys, onnx
from onnxcomp.planner import ort_growth as og
M = 2**20
for d in sys.argv[1:]:
    m = onnx.load(d + "/training_model.onnx")
    for h in (1.0, 1.5, 2.0):
        p = og.predict_growth_of(m, reorder=False, headroom=h)
        print(f"{d} headroom {h}: {p.total/M:.2f} P {p.pattern/M:.2f}x{p.pattern_copies} largest_out {p.largest_outside/M:.3f}")
