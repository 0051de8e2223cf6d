import sys
import onnx, onnx_ir as ir
from onnxcomp.planner import ort_growth as og
from onnxcomp.passes.base import run_passes
from onnxcomp.passes import split_conv_grad as scg
from onnxcomp.passes.conv_transpose_as_conv import ConvTransposeAsConvPass
M = 2**20
m = onnx.load(sys.argv[1] + "/training_model.onnx")
for L in [int(float(x) * 1024) for x in sys.argv[2].split(",")]:
    for after in (False, True):
        scg.DX_AFTER_BLOCKS = after
        im = ir.serde.deserialize_model(m)
        log = run_passes(im, [scg.SplitConvGradPass(L, dx_by_conv=True), ConvTransposeAsConvPass(L)])
        p = og.predict_growth_of(ir.serde.serialize_model(im), reorder=False)
        print(f"  {sys.argv[1]} L {L//1024}KiB dx_after={after} -> {p.total/M:.3f} P {p.pattern/M:.3f}x{p.pattern_copies} arena {p.arena/M:.3f} largest_out {p.largest_outside/M:.3f} nodes {p.nodes}")
