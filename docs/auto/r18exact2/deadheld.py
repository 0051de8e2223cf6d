"""At step S: buffers whose pattern interval covers S but none of whose tensors is live at S (held dead)."""
import sys, onnx
from collections import defaultdict
from onnxcomp.planner.ort_pattern import ort_static_shapes, allocation_plan, pattern_block
opt = onnx.load(sys.argv[1]); orig = onnx.load(sys.argv[2], load_external_data=False)
plan = allocation_plan(opt, ort_static_shapes(opt, orig)); blk = pattern_block(plan)
MiB = 2**20
prod = {y: i for i, n in enumerate(plan.nodes) for y in n.output if y}
last = defaultdict(int)
for i, n in enumerate(plan.nodes):
    for x in n.input:
        if x: last[x] = i
members = defaultdict(list)
for v, b in plan.buffer.items():
    members[b].append(v)
steps = [int(a) for a in sys.argv[3:]]
for S in steps:
    dead = 0; tot = 0; rows = []
    for b, (o, z) in blk.offsets.items():
        if not (plan.start[b] <= S <= plan.end[b]): continue
        tot += z
        alive = [v for v in members[b] if prod.get(v, -1) <= S <= max(last.get(v, prod.get(v, -1)), prod.get(v, -1))]
        if not alive:
            dead += z; rows.append((z, b, len(members[b]), plan.start[b], plan.end[b]))
    print(f"step {S} {plan.nodes[S].name}: pattern-live {tot/MiB:.2f} MiB, held dead {dead/MiB:.2f} MiB")
    for z, b, k, s0, e0 in sorted(rows, reverse=True)[:12]:
        print(f"   {z/MiB:7.3f} MiB  chain {k:3d} [{s0},{e0}] {b}")
