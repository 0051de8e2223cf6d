"""time_codec on a dense size grid (calibration's own code) for a few codecs; prints op ms per size (mean over nz)."""
import sys, tempfile, statistics, collections
from pathlib import Path
from onnxcomp.custom_ops import cpu
from onnxcomp.runtime.calibrate import time_codec
cpu.warm_up()
K = 1024
sizes = (256 * K, 512 * K, 1024 * K, 2048 * K, 4096 * K, 8192 * K)
for codec in sys.argv[1:]:
    with tempfile.TemporaryDirectory() as tmp:
        s = time_codec(codec, sizes, (0.5, 0.95), 4, Path(tmp))
    agg = collections.defaultdict(list)
    for x in s:
        agg[(x["direction"], x["nbytes"])].append((x["op_s"], x["direct_s"]))
    for (d, b), v in sorted(agg.items()):
        print(f"{codec:9s} {d:6s} {b/2**20:6.2f} MiB op {statistics.fmean(a for a, _ in v)*1e3:6.2f} ms direct {statistics.fmean(c for _, c in v)*1e3:6.2f} ms  {statistics.fmean(a for a, _ in v)/b*1e9:.2f} ns/B", flush=True)
