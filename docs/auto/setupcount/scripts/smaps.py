import sys, os
from pathlib import Path
from onnxcomp.runtime.proc_memory import status_bytes, trim_heap
import onnxruntime as ort
from onnxruntime.training import api
ort.set_default_logger_severity(3)
d = Path(sys.argv[1])
so = ort.SessionOptions(); so.execution_order = ort.ExecutionOrder.DEFAULT
st = api.CheckpointState.load_checkpoint(str(d / "checkpoint"))
m = api.Module(str(d / "training_model.onnx"), st, None, "cpu", so); trim_heap()
rows = []
cur = None
for line in open("/proc/self/smaps"):
    parts = line.split()
    if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        cur = [hi - lo, parts[5] if len(parts) > 5 else "[anon]", 0]
        rows.append(cur)
    elif parts[0] == "Rss:":
        cur[2] = int(parts[1])
import collections
by = collections.defaultdict(int)
for size, name, rss in rows:
    key = name if not name.startswith("/") else ("so" if ".so" in name else "file")
    if key == "[anon]":
        key = f"anon{'>=1M' if size >= 1 << 20 else '<1M'}"
    by[key] += rss
print(sys.argv[1][-20:], {k: v for k, v in sorted(by.items())}, "anon sizes>=1M:", sorted((s >> 10, r) for s, n, r in rows if n == "[anon]" and s >= 1 << 20))
os._exit(0)
