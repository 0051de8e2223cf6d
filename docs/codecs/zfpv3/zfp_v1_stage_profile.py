"""Where the v1 zfp numba encoder's time goes: the kernel (custom_ops/_zfp_numba.py, uncached copy) against
copies with the embedded bit-plane coder cut out, and then also the 16x16 bit transpose; process CPU time per
32 values next to a 64 MiB np.copyto's. Run single-threaded for a stage profile:

    NUMBA_NUM_THREADS=1 flock /tmp/onnxcomp-timing.lock .venv/bin/python docs/codecs/zfpv3/zfp_v1_stage_profile.py \\
        /tmp/zfpv3/acts/resnet18_64px_b32_relu_relu_out.npy
"""
from __future__ import annotations

import importlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from onnxcomp.custom_ops import cpu, zfp

cpu.threading_layer()
src_text = (Path(zfp.__file__).parent / "_zfp_numba.py").read_text().replace("cache=True", "cache=False")
no_code = src_text.replace("            if amax[j] == 0:\n", "            if True:  # stage cut: no bit-plane coder\n")
no_transpose = no_code.replace("        _transpose(v, nb)  #", "        pass  # stage cut: no transpose;")
assert no_code != src_text and no_transpose != no_code
tmp = Path(tempfile.mkdtemp())
for name, text in (("zfp_full", src_text), ("zfp_no_coder", no_code), ("zfp_no_coder_no_transpose", no_transpose)):
    (tmp / f"{name}.py").write_text(text)
sys.path.insert(0, str(tmp))

x = np.load(sys.argv[1]).astype(np.float32)
N, C, H, W = x.shape
flat = x.reshape(-1)
nblocks = N * C * ((H + 3) // 4) * ((W + 3) // 4)
rate = 8
data = np.zeros(-(-nblocks * rate * 16 // 32), np.uint32)
copy_src = np.random.default_rng(0).random(16 << 20, dtype=np.float32)
copy_dst = np.empty_like(copy_src)
runs = {"copy": lambda: np.copyto(copy_dst, copy_src)}
for name in ("zfp_full", "zfp_no_coder", "zfp_no_coder_no_transpose"):
    mod = importlib.import_module(name)
    runs[name] = (lambda mod=mod: (data.fill(0), mod.encode(flat, flat.size, H, W, nblocks, True, rate, zfp.PRECISION,
                                                             zfp.EXP_BITS, zfp.EXP_BIAS, data)))
    runs[name]()
cpu_s: dict[str, list[float]] = {k: [] for k in runs}
for _ in range(5):
    for k, f in runs.items():
        c = time.process_time()
        f()
        cpu_s[k].append(time.process_time() - c)
copy_ns = min(cpu_s["copy"]) / (copy_src.size / 32) * 1e9
for k, ts in cpu_s.items():
    ns = min(ts) / ((copy_src.size if k == "copy" else flat.size) / 32) * 1e9
    print(f"{k:28s} {ns:6.1f} ns CPU per 32 values ({copy_ns / ns:.3f} x copy)")
