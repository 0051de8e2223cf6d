import sys, onnx
from onnxcomp.planner import ort_growth as og
from onnxcomp.planner.ort_pattern import ort_optimized_model_of
d = sys.argv[1]
m = onnx.load(d + "/training_model.onnx")
opt = ort_optimized_model_of(m, base_dir=d)
gm = og.growth_model(opt, m, True)
lo, hi = int(sys.argv[2]), int(sys.argv[3])
for e in gm.events:
    if lo <= e.at <= hi or lo <= e.until <= hi:
        print(e)
print("setup sizes (last 5)", gm.setup[-5:], "n", len(gm.setup), "sum", sum(gm.setup))
