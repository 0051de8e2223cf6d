import sys
import onnx
from onnxcomp.planner import ort_pattern as op
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
original = onnx.load(path, load_external_data=False)
optimized = op.ort_optimized_model(path)
shapes = op.ort_static_shapes(optimized, original)
plan = op.allocation_plan(optimized, shapes)
block = op.pattern_block(plan)
n = len(plan.nodes)
# tensors per buffer
tens = {}
for y, b in plan.buffer.items(): tens.setdefault(b, []).append(y)
def life(y):
    s = next((i for i, nd in enumerate(plan.nodes) if y in nd.output), None)
    e = max((i for i, nd in enumerate(plan.nodes) if y in nd.input), default=None)
    return s, e
for st in map(int, sys.argv[2:]):
    at = sorted([b for b in block.offsets if plan.start[b] <= st <= plan.end[b]], key=lambda b: -block.offsets[b][1])
    print(f"step {st} {plan.nodes[st].op_type} {plan.nodes[st].name[:70]} live {sum(block.offsets[b][1] for b in at)/M:.3f}")
    for b in at[:16]:
        # which tensor of this buffer is live at st
        cur = [y for y in tens[b] if (lambda se: se[0] is not None and se[0] <= st <= (se[1] if se[1] is not None else n))(life(y))]
        print(f"   {block.offsets[b][1]/M:6.3f} {cur[:2]}")
print("idle summary")
for st in map(int, sys.argv[2:]):
    at = [b for b in block.offsets if plan.start[b] <= st <= plan.end[b]]
    idle = []
    for b in at:
        cur = [y for y in tens[b] if (lambda se: se[0] is not None and se[0] <= st <= (se[1] if se[1] is not None else n))(life(y))]
        if not cur: idle.append(b)
    print(st, "live", round(sum(block.offsets[b][1] for b in at)/M,3), "idle", round(sum(block.offsets[b][1] for b in idle)/M,3), "n idle", len(idle))
    for b in sorted(idle, key=lambda b:-block.offsets[b][1])[:6]:
        print("    ", round(block.offsets[b][1]/M,3), [(y[:60], life(y)) for y in tens[b]][:4], len(tens[b]))
