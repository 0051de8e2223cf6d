import sys, collections, onnx
from onnxcomp.planner import ort_growth as og
from onnxcomp.planner.ort_pattern import ort_optimized_model
path=sys.argv[1]
gm=og.growth_model(ort_optimized_model(path), onnx.load(path, load_external_data=False))
c=collections.Counter(og.rounded(e.nbytes) for e in gm.events)
print("replay P", gm.pattern, "events", len(gm.events))
for sz,n in sorted(c.items(), key=lambda kv:-kv[0]*kv[1])[:15]: print(sz,n)
