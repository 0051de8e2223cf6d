import sys, json
from pathlib import Path
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings
s = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
for d in sys.argv[1:]:
    r = measure(Path(d), model=None, steps=3, settings=s)
    print(d, "growth %.2f setup %.2f" % (r.growth_bytes / 2**20, r.rss_setup_bytes / 2**20), flush=True)
