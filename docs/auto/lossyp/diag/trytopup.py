import sys, shutil, os, onnx, onnx_ir as ir
from onnxcomp.passes import MaxPoolIndexPass, SignBitsPass
from onnxcomp.passes.base import run_passes
src, dst = sys.argv[1], sys.argv[2]
if os.path.exists(dst): shutil.rmtree(dst)
os.makedirs(dst)
m = ir.serde.deserialize_model(onnx.load(src + "/training_model.onnx"))
passes = [MaxPoolIndexPass(native=True)] + ([SignBitsPass(native=True)] if "bits" in sys.argv[3:] else [])
log = run_passes(m, passes)
print([(x.get("tensor"), x.get("encoding")) for x in log.records])
onnx.save(ir.serde.serialize_model(m), dst + "/training_model.onnx")
