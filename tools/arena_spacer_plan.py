"""Spacer sizes for DIR: the fewest bytes of extra set-up allocations (each just over the largest free chunk, so it
opens the next, doubled region) until the predicted growth stops falling; prints the sizes and predictions."""
import sys, onnx
from onnxcomp.planner.ort_pattern import ort_optimized_model
from onnxcomp.planner.ort_growth import growth_model, _predict, GrowthModel, Arena, rounded
MiB = 2**20
d = sys.argv[1]
orig = onnx.load(f"{d}/training_model.onnx", load_external_data=False)
gm = growth_model(ort_optimized_model(f"{d}/training_model.onnx"), orig)
spacers = []
best = _predict(gm).total
print("no spacer", best / MiB)
for _ in range(6):
    a = Arena()
    for k, s in enumerate(gm.setup + spacers):
        a.alloc(k, s)
    free = max((c.size for r in a.regions for c in r.chunks if c.free), default=0)
    s = rounded(free + 1)
    spacers.append(s)
    p = _predict(GrowthModel(gm.setup + spacers, gm.pattern, gm.pattern_touched, gm.events, gm.nodes, gm.heap,
                             gm.heap_at, gm.pyops))
    print([x for x in spacers], f"sum {sum(spacers)/MiB:.2f} MiB -> growth {p.total/MiB:.2f} copies {p.pattern_copies}")
