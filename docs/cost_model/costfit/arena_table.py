"""Time the calibration's ops under ORT's arena as intermediates (calibrate.time_common_ops(arena=True)) with the
shipped defaults' plan (sizes, repeats), fit them (calibrate.fit_ops) and write {ops_arena, samples, load}."""
import json, os, sys, tempfile
from pathlib import Path
from onnxcomp.runtime import calibrate as C
d = json.load(open(sys.argv[1]))
plan = d["plan"]
load0 = os.getloadavg()
tmp = Path(tempfile.mkdtemp(dir="/tmp/costfit"))
samples = C.time_common_ops(tuple(plan["sizes"]), int(plan["repeats"]), tmp, arena=True)
out = {"ops_arena": C.fit_ops(samples), "samples": samples, "load_average": [load0, os.getloadavg()],
       "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_")}
Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
for op, f in out["ops_arena"].items():
    print(op, [f"{c:.3g}" for c in f["coef"]], "r2", round(f.get("r2", 0), 3))
print("load", out["load_average"])
