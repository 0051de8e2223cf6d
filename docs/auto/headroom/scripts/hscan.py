"""Growth replay of one plan at several headrooms (one ORT optimisation), and the set-up's free room."""
import sys, onnx
from onnxcomp.planner import ort_growth as og
from onnxcomp.planner.ort_pattern import ort_optimized_model_of
M = 2**20
d = sys.argv[1]
m = onnx.load(d + "/training_model.onnx")
gm = og.growth_model(ort_optimized_model_of(m, base_dir=d), m, True)
a = og.Arena()
for k, s in enumerate(gm.setup):
    a.alloc(("setup", k), s)
print("setup regions", [(r.size, sorted([c.size for c in r.chunks if c.free], reverse=True)[:4]) for r in a.regions])
print("P", gm.pattern / M, "events", len(gm.events), "largest", max(e.nbytes for e in gm.events))
# peak concurrent outside-P bytes in a step
live, peak, at_peak = {}, 0, None
by_at, by_until = {}, {}
for e in gm.events:
    by_at.setdefault(e.at, []).append(e); by_until.setdefault(e.until, []).append(e)
for i in range(max(e.until for e in gm.events) + 1):
    for e in by_at.get(i, ()): live[e.name] = e.nbytes
    s = sum(og.rounded(v) for v in live.values())
    if s > peak: peak, at_peak = s, (i, dict(live))
    for e in by_until.get(i, ()): live.pop(e.name, None)
print("max concurrent outside P (rounded)", peak, "at node", at_peak[0], sorted(at_peak[1].items(), key=lambda x: -x[1])[:5])
for h in [float(x) for x in sys.argv[2:]]:
    p = og._predict(og.with_headroom(gm, h), 3)
    print(f"headroom {h}: growth {p.total/M:.2f} P x{p.pattern_copies}")
