"""Open a plan's training session as `measure` does (ORT defaults), logger at WARNING; count ORT's lenient-merge warnings."""
import sys
from pathlib import Path
import onnxruntime as ort
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
ort.set_default_logger_severity(2)
d = Path(sys.argv[1])
st = RuntimeSettings(arena=True, mem_pattern=True, execution_order="default", mem_reuse=True)
s = open_artifact_session(d, d / "training_model.onnx", settings=st, seed=0, bounds={})
print("opened", d)
