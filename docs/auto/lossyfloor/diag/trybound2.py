import sys, time
import onnx, onnx_ir as ir
from onnxcomp.planner import ort_growth as og
from onnxcomp.passes.base import run_passes
from onnxcomp.passes.split_conv_grad import SplitConvGradPass
from onnxcomp.passes.conv_transpose_as_conv import ConvTransposeAsConvPass
from onnxcomp.passes.default_order import DefaultOrderPass
M = 2**20
m = onnx.load(sys.argv[1] + "/training_model.onnx")
for L in [int(float(x) * 1024) for x in sys.argv[2].split(",")]:
    for reorder in (False, True):
        im = ir.serde.deserialize_model(m)
        ps = [SplitConvGradPass(L, dx_by_conv=True), ConvTransposeAsConvPass(L)] + ([DefaultOrderPass()] if reorder else [])
        log = run_passes(im, ps)
        m2 = ir.serde.serialize_model(im)
        p = og.predict_growth_of(m2, reorder=False)
        print(f"  {sys.argv[1]} L {L//1024}KiB reorder={reorder} -> {p.total/M:.3f} P {p.pattern/M:.3f}x{p.pattern_copies} arena {p.arena/M:.3f} largest_out {p.largest_outside/M:.3f} nodes {p.nodes} mods {log.modified_by}")
