"""Write a copy of a plan dir with its ConvGrads forced into input-channel blocks at a limit (dX by ConvGrad blocks)."""
import sys, shutil, onnx
import onnx_ir as ir
import onnxcomp.passes.split_conv_grad as scg
from onnxcomp.passes.split_conv_grad import SplitConvGradPass
from onnxcomp.passes.base import run_passes
scg.blocks_that_pay = lambda dy, x, w, needs_dx, limit: min(int(x[1]), -(-scg._workspace(dy, w) // limit))
src, dst, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copytree(src, dst, dirs_exist_ok=True)
m = ir.load(src + "/training_model.onnx")
r = run_passes(m, [SplitConvGradPass(limit)])
print([(x.detail["conv_grad"], x.detail["input_channel_blocks"]) for x in r.records])
ir.save(m, dst + "/training_model.onnx")
