import sys, time
import onnx, onnx_ir as ir
from onnxcomp.planner import ort_growth as og
from onnxcomp.passes.split_conv_grad import SplitConvGradPass
from onnxcomp.passes.conv_transpose_as_conv import ConvTransposeAsConvPass
M = 2**20
m = onnx.load(sys.argv[1] + "/training_model.onnx")
base = og.predict_growth_of(m, reorder=False)
print(f"{sys.argv[1]} base {base.total/M:.3f} P {base.pattern/M:.3f}x{base.pattern_copies} arena {base.arena/M:.3f} largest_out {base.largest_outside/M:.3f}")
for L in [int(float(x) * 1024) for x in sys.argv[2].split(",")]:
    im = ir.serde.deserialize_model(m)
    r1 = SplitConvGradPass(L, dx_by_conv=True)(im)
    r2 = ConvTransposeAsConvPass(L)(r1.model)
    m2 = ir.serde.serialize_model(r2.model)
    t = time.time()
    p = og.predict_growth_of(m2, reorder=False)
    print(f"  L {L//1024}KiB convgrad-split {len(r1.records)} ct {len(r2.records)} -> {p.total/M:.3f} P {p.pattern/M:.3f}x{p.pattern_copies} arena {p.arena/M:.3f} largest_out {p.largest_outside/M:.3f} nodes {p.nodes} ({time.time()-t:.0f}s)")
