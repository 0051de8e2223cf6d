"""Decompose a plan's predicted ORT-defaults growth: P's live peak, what lives there, events outside P."""
import sys, json
from collections import defaultdict
import onnx
from onnxcomp.planner import ort_pattern as op, ort_growth as og
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
original = onnx.load(path, load_external_data=False)
optimized = op.ort_optimized_model(path)
shapes = op.ort_static_shapes(optimized, original)
plan = op.allocation_plan(optimized, shapes)
block = op.pattern_block(plan)
gm = og.growth_model(optimized, original, reorder=False)
pred = og._predict(gm)
print(f"== {sys.argv[1]}  nodes(orig) {len(original.graph.node)} nodes(opt) {len(plan.nodes)}")
print({k: (round(v / M, 3) if isinstance(v, int) and v > 5000 else v) for k, v in pred.to_dict().items()})
# live per step
n = len(plan.nodes)
live = [0] * (n + 1)
bufs = [b for b in block.offsets]
for b in bufs:
    for s in range(plan.start[b], min(plan.end[b], n) + 1):
        live[s] += block.offsets[b][1]
pk = max(range(n + 1), key=lambda s: live[s])
print(f"P {block.size/M:.3f}  max live {live[pk]/M:.3f} at step {pk} ({plan.nodes[pk].op_type if pk<n else 'end'} {plan.nodes[pk].name if pk<n else ''})")
# extent setter: buffer with top offset+size==P
top = max(bufs, key=lambda b: block.offsets[b][0] + block.offsets[b][1])
o, sz = block.offsets[top]
print(f"extent set by {top} off {o/M:.3f} size {sz/M:.3f} interval {plan.start[top]}-{plan.end[top]} producer {plan.nodes[plan.start[top]].op_type}")
# live at extent setter's start
s0 = plan.start[top]
print(f"live at extent-setter start step {s0}: {live[s0]/M:.3f}")
def cls(b):
    node = plan.nodes[plan.start[b]]
    nm = b.lower()
    if plan.end[b] >= n: return "unread/end"
    if "grad" in nm: return "grad"
    if node.domain == "ai.onnx.contrib": return "payload"
    # stash: produced before first backward? approximate by interval length
    return "fwd/stash" if plan.end[b] - plan.start[b] > n // 10 else "short"
for s, label in ((pk, "maxlive"), (s0, "extent")):
    at = sorted([b for b in bufs if plan.start[b] <= s <= plan.end[b]], key=lambda b: -block.offsets[b][1])
    by = defaultdict(int)
    for b in at: by[cls(b)] += block.offsets[b][1]
    print(f" [{label} step {s}] {len(at)} buffers; by class", {k: round(v / M, 3) for k, v in by.items()})
    for b in at[:14]:
        print(f"    {block.offsets[b][1]/M:7.3f} {cls(b):10s} [{plan.start[b]:5d},{plan.end[b]:5d}] {plan.nodes[plan.start[b]].op_type:22s} {b[:90]}")
ev = sorted(gm.events, key=lambda e: -e.nbytes)
print(f" outside-P events {len(ev)} total-size {sum(e.nbytes for e in ev)/M:.3f}; largest:")
for e in ev[:8]:
    print(f"    {e.nbytes/M:7.3f} [{e.at},{e.until}] {plan.nodes[e.at].op_type} {e.name[:90]}")
