import ctypes, json, sys
from pathlib import Path
from onnxcomp.runtime.proc_memory import status_bytes, trim_heap
libc = ctypes.CDLL("libc.so.6")
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = MI2
M=2**20
def mi(tag):
    m = libc.mallinfo2(); print(f"{tag:28s} heap arena {m.arena/M:7.2f} used {m.uordblks/M:7.2f} free {m.fordblks/M:6.2f} top {m.keepcost/M:5.2f} rss {status_bytes('VmRSS')/M:7.1f}", flush=True)
d = Path(sys.argv[1]); model = d / "training_model.onnx"
import onnxruntime as ort
mi("import ort")
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime._measure_worker import _load_codec_kernels
mi("import onnxcomp")
if "--kernels-first" in sys.argv:
    _load_codec_kernels(model); mi("kernels")
st = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
s = open_artifact_session(d, model, settings=st, seed=0, bounds={})
mi("session")
_load_codec_kernels(model); mi("kernels")
trim_heap(); mi("trimmed")
