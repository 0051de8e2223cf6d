"""Arena off, pattern on (ORT defaults otherwise): every allocation outside the pattern block is a malloc.
Writes STEP markers into MALLOC_LOG_FILE. Usage: LD_PRELOAD=malloc_log.so MALLOC_LOG_FILE=F MALLOC_LOG_MIN=N mlog.py DIR"""
import os, sys
from pathlib import Path
d = Path(sys.argv[1]); model = d / "training_model.onnx"
import onnxruntime as ort
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime._measure_worker import _load_codec_kernels
ort.set_default_logger_severity(3)
st = RuntimeSettings(arena=False, mem_pattern=True, mem_reuse=True, execution_order="default")
s = open_artifact_session(d, model, settings=st, seed=0, bounds={})
spec = graph_data(d, model, list(s.module.input_names()))
gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
batches = [next(gen) for _ in range(3)]
_load_codec_kernels(model)
fd = os.open(os.environ["MALLOC_LOG_FILE"], os.O_WRONLY | os.O_APPEND)
for i, (x, y) in enumerate(batches):
    os.write(fd, f"STEP {i}\n".encode()); s.step(x, y)
os.write(fd, b"END\n")
