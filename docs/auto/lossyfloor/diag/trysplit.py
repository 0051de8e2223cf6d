import sys, math, time
import onnx, onnx_ir as ir
from onnxcomp.planner import ort_growth as og
from onnxcomp.passes import split_conv_grad as scg
M = 2**20
path = sys.argv[1] + "/training_model.onnx"
force = len(sys.argv) > 3 and sys.argv[3] == "force"
if force:
    def bp(dy, x, w, needs_dx, limit):
        ws = scg._workspace(dy, w)
        if ws <= limit: return 0
        p = min(int(x[1]), math.ceil(ws / limit))
        return p if p > 1 else 0
    scg.blocks_that_pay = bp
m = onnx.load(path)
t = time.time()
base = og.predict_growth_of(m, reorder=False)
print(f"base {base.total/M:.3f} P {base.pattern/M:.3f}x{base.pattern_copies} arena {base.arena/M:.3f} largest_out {base.largest_outside/M:.3f} ({time.time()-t:.0f}s)")
for L in [int(float(x) * 1024) for x in sys.argv[2].split(",")]:
    im = ir.serde.deserialize_model(m)
    out = scg.SplitConvGradPass(L)(im)
    recs = out.records if hasattr(out, "records") else []
    sk = getattr(out, "skipped", [])
    m2 = ir.serde.serialize_model(out.model)
    t = time.time()
    p = og.predict_growth_of(m2, reorder=False)
    print(f"L {L//1024}KiB split {len(recs)} skipped {len(sk)} {[s.reason for s in sk][:3]} -> {p.total/M:.3f} P {p.pattern/M:.3f}x{p.pattern_copies} arena {p.arena/M:.3f} largest_out {p.largest_outside/M:.3f} nodes {p.nodes} ({time.time()-t:.0f}s)")
