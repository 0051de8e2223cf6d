import sys, tempfile, pathlib, collections, os
from onnxcomp.runtime.calibrate import time_common_ops
print(sys.argv[1], os.getloadavg())
for arena in (False, True):
    s = time_common_ops((1 << 20, 4 << 20), 4, pathlib.Path(tempfile.mkdtemp()), arena=arena)
    for x in s:
        if x["op"] in ("Mul", "Cast:float32->float16", "Cast:bool->float32", "Slice"):
            print(sys.argv[1], "arena" if arena else "plain", x["op"], x["nbytes"] >> 20, "MiB-traffic", f"{x['seconds']/x['nbytes']*1e9:.3f} ns/B", f"mix {x.get('mixed_bytes',0)/x['nbytes']:.2f}")
