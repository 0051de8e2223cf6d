import sys, shutil, onnx, time
from pathlib import Path
from onnxcomp.passes.detach_stats import DetachStatsPass
src, dst, gated = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
if dst.exists(): shutil.rmtree(dst)
shutil.copytree(src, dst)
m = onnx.load(str(src / "training_model.onnx"))
t = time.time()
r = DetachStatsPass(only_lowering=gated).run(m)
print("records", len(r.records), "skipped", len(r.skipped), "modified", r.modified, f"{time.time()-t:.1f}s")
for s in r.skipped[:5]: print("  skip", s)
if r.records: print("  ", dict(r.records[0].detail))
onnx.save(r.model, str(dst / "training_model.onnx"))
