import sys, onnx
from onnxcomp.planner import ort_growth as og
from onnxcomp.planner.ort_pattern import ort_optimized_model
M=2**20
path=sys.argv[1]
orig=onnx.load(path, load_external_data=False)
gm=og.growth_model(ort_optimized_model(path), orig)
print("setup buffers", len(gm.setup), "total %.2f MiB"%(sum(gm.setup)/M), "P %.2f"%(gm.pattern/M), "events", len(gm.events))
a=og.Arena()
for k,s in enumerate(gm.setup): a.alloc(("s",k),s)
print("setup regions", [(r.size/M, round(r.touched_bytes()/M,2)) for r in a.regions])
g,arena=gm.simulate(3)
print("after", [(r.size/M, round(r.touched_bytes()/M,2)) for r in arena.regions], "growth %.2f"%(g/M))
import collections
c=collections.Counter((e.name.split('/')[-1] if '/scratch' in e.name else 'dyn') for e in gm.events)
print(c)
big=sorted(gm.events,key=lambda e:-e.nbytes)[:10]
for e in big: print(e.name[:70], e.nbytes, e.at, e.until)
