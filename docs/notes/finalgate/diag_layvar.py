import sys
from pathlib import Path
from collections import defaultdict
import onnx
from onnxcomp.planner import ort_pattern as op
MI = 2**20
MEAS = {"W/plain_deep": 20.109*MI, "W/squeezenet_s": 14.156*MI, "W/mobilenet_v1_s": 17.594*MI, "W/wide_resnet_s": 29.695*MI, "W/densenet_s": 60.996*MI, "W/leaky_vgg": 63.171*MI,
        "after/plain_deep": 9860864, "after/densenet_s": 16927744, "after/squeezenet_s": 4060416, "after/mobilenet_v1_s": 4969728,
        "after/wide_resnet_s": 11676160, "after/leaky_vgg": 10323968,
        "exact/squeezenet_s": 10153984, "exact/mobilenet_v1_s": 8397824, "exact/densenet_s": 32564736, "exact/plain_deep": 11796480}
V = sys.argv[1]
def layout(plan):
    release = defaultdict(list)
    for b, step in plan.end.items(): release[step].append(b)
    placed, blocks, total = {}, [], 0
    for step, node in enumerate(plan.nodes):
        for y in node.output:
            if not y or plan.kind.get(y) != "alloc": continue
            size = plan.nbytes(y)
            if size == 0: continue
            start, end = plan.start[y], plan.end[y]
            current, waste, best = 0, None, None
            for b in blocks:
                if V != "nooverlapcheck" and (plan.end[b] < start or end < plan.start[b]): continue
                if V == "exclusive" and (plan.end[b] <= start or end <= plan.start[b]): continue
                off, sz = placed[b]
                if off >= current:
                    gap = off - current
                    if gap >= size and (waste is None or (gap - size <= waste if V == "le" else gap - size < waste)): waste, best = gap - size, current
                current = max(current, off + sz)
            if V != "notail" and current < total and total - current >= size and (waste is None or (total - current - size <= waste if V in ("le", "tail_le") else total - current - size < waste)):
                best = current
            if best is None: best = current
            total = max(total, best + size); placed[y] = (best, size)
            if V == "ins_offset":
                at = next((k for k, b in enumerate(blocks) if placed[b][0] >= best), len(blocks))
            elif V == "ins_after":
                at = next((k for k, b in enumerate(blocks) if placed[b][0] > best), len(blocks))
            else:
                at = next((k for k, b in enumerate(blocks) if placed[b][0] > best or (placed[b][0] == best and placed[b][1] >= size)), len(blocks))
            blocks.insert(at, y)
        gone = set(release.get(step, ()))
        if gone: blocks = [b for b in blocks if b not in gone]
    return total
for d, m in MEAS.items():
    p = Path(f"/tmp/finalgate/{d}/training_model.onnx"); c = Path(f"optcache/{d.replace('/', '_')}.onnx")
    opt = onnx.load(str(c)); sh = op.ort_static_shapes(opt, onnx.load(str(p), load_external_data=False))
    plan = op.allocation_plan(opt, sh)
    base = op.pattern_block(plan).size; new = layout(plan)
    print(f"{d:24s} base {(base-m)/m*100:+.3f} % {V} {(new-m)/m*100:+.3f} %", flush=True)
