import os, sys, json
from pathlib import Path
before = dict(os.environ)
from onnxcomp.cli import main
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    main(["transform", "W/plain_deep", "-o", "/tmp/setupfree/T/pd_x", "--force", "--policy", "auto", "--exact", "--budget", "16742842B", "--budget-for", "ort-defaults", "--json"])
after = dict(os.environ)
print("env changed:", {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)})
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings
s = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
for d in ["/tmp/setupfree/T/pd_x", "W/plain_deep"]:
    r = measure(Path(d), model=None, steps=3, settings=s)
    print(d, "growth %.2f setup %.2f" % (r.growth_bytes / 2**20, r.rss_setup_bytes / 2**20), flush=True)
