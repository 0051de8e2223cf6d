import sys, onnx, re
from onnxcomp.planner.ort_pattern import ort_static_shapes, allocation_plan, pattern_block
opt = onnx.load(sys.argv[1]); orig = onnx.load(sys.argv[2], load_external_data=False)
shapes = ort_static_shapes(opt, orig)
MiB = 2**20
plan = allocation_plan(opt, shapes)
base = pattern_block(plan)
print("base", base.size / MiB)
def without(pred, label):
    p = allocation_plan(opt, shapes)
    drop = [b for b in p.kind if p.kind[b] == "alloc" and pred(b, p)]
    for b in drop:
        p.shapes[b] = (p.shapes[b][0], None)
    print(f"{label:40s} dropped {len(drop):4d} P {pattern_block(p).size / MiB:.3f}")
without(lambda b, p: b in ("saved_mean_def", "saved_inv_std"), "stem BN stats")
without(lambda b, p: re.match(r"saved_(mean_def|inv_std)", b) is not None, "all BN stats")
without(lambda b, p: 0 < p.nbytes(b) <= 4096, "<=4KiB")
without(lambda b, p: 0 < p.nbytes(b) <= 256, "<=256B")
without(lambda b, p: 0 < p.nbytes(b) <= 256 or b in ("saved_mean_def", "saved_inv_std"), "<=256B")
without(lambda b, p: 0 < p.nbytes(b) <= 65536, "<=64KiB")
def shrink(pred, k, label, extra=lambda b, p: False):
    p = allocation_plan(opt, shapes)
    n = 0
    for b in list(p.shapes):
        if p.kind.get(b) == "alloc" and pred(b, p):
            t, s = p.shapes[b]; p.shapes[b] = (t, (s[0] // k,) + tuple(s[1:])); n += 1
        elif p.kind.get(b) == "alloc" and extra(b, p):
            p.shapes[b] = (p.shapes[b][0], None)
    blk = pattern_block(p)
    print(f"{label:40s} shrunk {n} P {blk.size / MiB:.3f}")
    return p, blk
for k in (2, 4, 8):
    shrink(lambda b, p: b.endswith("weight_grad") and p.nbytes(b) >= 4 * MiB, k, f"wgrad>=4MiB /{k}")
    shrink(lambda b, p: b.endswith("weight_grad") and p.nbytes(b) >= 4 * MiB, k, f"wgrad>=4MiB /{k} + stem stats",
           lambda b, p: b in ("saved_mean_def", "saved_inv_std"))
