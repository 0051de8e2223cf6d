import sys, json
from pathlib import Path
from onnxcomp.runtime.proc_memory import status_bytes, trim_heap
import onnxruntime as ort
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime import _measure_worker as mw
ort.set_default_logger_severity(3)
d = Path(sys.argv[1]); mp = d / "training_model.onnx"
import os
st = RuntimeSettings(arena=os.environ.get("ARENA","1")=="1", mem_pattern=True, execution_order="default", mem_reuse=True)
M = 2**20
r = [("start", status_bytes("VmRSS"))]
s = open_artifact_session(d, mp, settings=st, seed=0, bounds={})
trim_heap(); r.append(("session", status_bytes("VmRSS")))
mw._load_codec_kernels(mp)
trim_heap(); r.append(("codecs(onnx.load)", status_bytes("VmRSS")))
print(sys.argv[1][-30:], " ".join(f"{k} {(v - r[0][1])/M:.2f}" for k, v in r[1:]), f"start {r[0][1]/M:.2f}")
