import sys, os, shutil
import onnx, onnx_ir as ir
from onnxcomp.passes.split_conv_grad import SplitConvGradPass
from onnxcomp.passes.conv_transpose_as_conv import ConvTransposeAsConvPass
src, dst, L = sys.argv[1], sys.argv[2], int(float(sys.argv[3]) * 1024)
shutil.copytree(src, dst, dirs_exist_ok=True)
m = onnx.load(src + "/training_model.onnx")
im = ir.serde.deserialize_model(m)
r1 = SplitConvGradPass(L, dx_by_conv=True)(im)
r2 = ConvTransposeAsConvPass(L)(r1.model)
onnx.save(ir.serde.serialize_model(r2.model), dst + "/training_model.onnx")
print(len(r1.records), len(r2.records))
