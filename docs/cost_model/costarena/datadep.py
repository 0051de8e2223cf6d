"""dpr_fp8 / bitmask / sz encode+decode time on calibration-style inputs vs other value distributions (direct calls and ORT op)."""
import time, statistics, sys, tempfile
from pathlib import Path
import numpy as np
from onnxcomp.custom_ops import get_codec, cpu
from onnxcomp.runtime.calibrate import activation, cold_copies, CODEC_PARAMS
cpu.warm_up()
rng = np.random.default_rng(0)
N = 2 << 20
def inputs():
    a = activation(N, 1.0, rng)
    yield "calib nz1.0", a
    yield "calib nz0.5", activation(N, 0.5, rng)
    g = rng.standard_normal(a.shape, dtype=np.float32)
    yield "normal", g
    yield "normal*1e-3", g * np.float32(1e-3)
    yield "bn-like normal*0.05+0.02", g * np.float32(0.05) + np.float32(0.02)
for codec in sys.argv[1:]:
    c = get_codec(codec); params = dict(CODEC_PARAMS.get(codec, {}))
    for name, x in inputs():
        if c.input_dtype == "bool":
            x = x > 0
        xs = cold_copies(x)
        enc, dec = [], []
        for r in range(8):
            xr = xs[r % len(xs)]
            t0 = time.perf_counter(); p = c.encode_cpu(xr, **params); t1 = time.perf_counter(); c.decode_cpu(p, **params); t2 = time.perf_counter()
            if r: enc.append(t1 - t0); dec.append(t2 - t1)
        print(f"{codec:9s} {name:26s} enc {statistics.median(enc)*1e3:6.2f} ms dec {statistics.median(dec)*1e3:6.2f} ms ({x.nbytes/2**20:.1f} MiB)", flush=True)
