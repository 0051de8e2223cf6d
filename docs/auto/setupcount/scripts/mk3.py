"""Variants of the exact split to find the set-up cost: NOGATEW=1 leaves W ungated."""
import sys, os, shutil
import onnx_ir as ir
import onnxcomp.passes.split_conv_grad as scg
from onnxcomp.passes.editor import IrGraphEditor
from onnxcomp.passes.base import run_passes
orig = IrGraphEditor.gate
def gate(self, value, *a, **k):
    if (os.environ.get("NOGATEW") == "1" and value.name.endswith("weight")) or os.environ.get("NOGATE") == "1":
        return value
    return orig(self, value, *a, **k)
IrGraphEditor.gate = gate
src, dst, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copytree(src, dst, dirs_exist_ok=True)
m = ir.load(src + "/training_model.onnx")
r = run_passes(m, [scg.SplitConvGradPass(limit, exact=True)])
print([(x.detail["conv_grad"], x.detail["input_channel_blocks"]) for x in r.records], len(list(m.graph)))
ir.save(m, dst + "/training_model.onnx")
