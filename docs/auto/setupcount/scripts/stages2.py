import sys, os
from pathlib import Path
from onnxcomp.runtime.proc_memory import status_bytes, trim_heap
import onnxruntime as ort
from onnxruntime.training import api
ort.set_default_logger_severity(0 if os.environ.get("LOGV") else 3)
d = Path(sys.argv[1]); M = 2**20
so = ort.SessionOptions(); so.execution_order = ort.ExecutionOrder.DEFAULT
if os.environ.get("NOOPT"): so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
if os.environ.get("NOPAT"): so.enable_mem_pattern = False
if os.environ.get("T1"): so.intra_op_num_threads = 1
r = [status_bytes("VmRSS")]
st = api.CheckpointState.load_checkpoint(str(d / "checkpoint")); trim_heap(); r.append(status_bytes("VmRSS"))
m = api.Module(str(d / "training_model.onnx"), st, None, "cpu", so); trim_heap(); r.append(status_bytes("VmRSS"))
o = api.Optimizer(str(d / "optimizer_model.onnx"), m); trim_heap(); r.append(status_bytes("VmRSS"))
print(f"{str(d)[-24:]:24s} ckpt {(r[1]-r[0])/M:.2f} module {(r[2]-r[1])/M:.2f} opt {(r[3]-r[2])/M:.2f} total {(r[3]-r[0])/M:.2f}")
os._exit(0)
