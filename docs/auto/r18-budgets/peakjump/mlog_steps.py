import os, sys
from pathlib import Path
d = Path(sys.argv[1]); model = d / "training_model.onnx"
import onnxruntime as ort
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
ort.set_default_logger_severity(3)
s = open_artifact_session(d, model, settings=RuntimeSettings(), seed=0, bounds={})
spec = graph_data(d, model, list(s.module.input_names()))
gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
fd = os.open(os.environ["MALLOC_LOG_FILE"], os.O_WRONLY | os.O_APPEND)
for i in range(3):
    x, y = next(gen)
    os.write(fd, f"STEP {i}\n".encode())
    s.step(x, y)
    os.write(fd, f"END {i}\n".encode())
