"""A/B: zfp v1 kernel (main's _zfp_numba.py) vs this tree's v3 codec, interleaved rounds, CPU and wall time,
as fractions of a 64 MiB np.copyto on both cores measured in the same rounds."""
import importlib.util, os, sys, time, statistics, argparse
import numpy as np
from concurrent.futures import ThreadPoolExecutor
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu

ap = argparse.ArgumentParser()
ap.add_argument("tensor"); ap.add_argument("--rate", type=int, default=8); ap.add_argument("--rounds", type=int, default=15)
ap.add_argument("--no-v1", action="store_true")
a = ap.parse_args()
x = np.load(a.tensor)
Z = zfp.ZFP()
lay = zfp.layout_of(x.shape)
flat = x.reshape(-1)

variants = {}
payload = Z.encode(x, rate=a.rate)
variants["v3 encode"] = lambda: Z.encode(x, rate=a.rate)
variants["v3 decode"] = lambda: Z.decode(payload)
if not a.no_v1:
    cpu.threading_layer()
    spec = importlib.util.spec_from_file_location("zfp_v1_numba", "/work/main/custom_ops/_zfp_numba.py")
    v1 = importlib.util.module_from_spec(spec); spec.loader.exec_module(v1)
    enc1 = cpu._locked(v1.encode); dec1 = cpu._locked(v1.decode)
    words1 = np.zeros(-(-lay.nblocks * a.rate * lay.block_size // 32), np.uint32)
    def v1enc():
        words = np.zeros(words1.size, np.uint32)
        enc1(flat, flat.size, lay.height, lay.width, lay.nblocks, lay.two_d, a.rate, 26, 9, 149, words)
        return words
    words1 = v1enc()
    y1 = np.empty(flat.size, np.float32)
    def v1dec():
        y = np.empty(flat.size, np.float32)
        dec1(words1, flat.size, lay.height, lay.width, lay.nblocks, lay.two_d, a.rate, 26, 9, 149, y)
        return y
    variants["v1 encode (kernel)"] = v1enc
    variants["v1 decode (kernel)"] = v1dec

src = np.random.default_rng(0).random((64 << 20) // 4, dtype=np.float32)
dst = np.empty_like(src)
cores = os.cpu_count()
bounds = np.linspace(0, src.size, cores + 1).astype(int)
pool = ThreadPoolExecutor(cores)
def copy():
    list(pool.map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]]), range(cores)))
for f in variants.values(): f()
copy()
res = {k: ([], []) for k in ["copy", *variants]}
for r in range(a.rounds):
    items = [("copy", copy), *variants.items()]
    if r % 2: items = items[::-1]
    for k, f in items:
        t, c = time.perf_counter(), time.process_time()
        f()
        res[k][0].append(time.perf_counter() - t); res[k][1].append(time.process_time() - c)
print(f"tensor {a.tensor} {x.shape} rate {a.rate}; load {os.getloadavg()}")
cb = src.nbytes / 1e6
copy_cpu_best = cb / min(res["copy"][1]); copy_cpu_med = cb / statistics.median(res["copy"][1])
copy_wall_best = cb / min(res["copy"][0]); copy_wall_med = cb / statistics.median(res["copy"][0])
print(f"copy: {copy_cpu_best:.0f} MB/CPU-s best, {copy_cpu_med:.0f} median; wall {copy_wall_best:.0f} best {copy_wall_med:.0f} median")
mb = x.nbytes / 1e6
for k in variants:
    w, c = res[k]
    cbest, cmed = mb / min(c), mb / statistics.median(c)
    wbest, wmed = mb / min(w), mb / statistics.median(w)
    print(f"{k:22s} CPU {cbest:7.0f} MB/s ({cbest / copy_cpu_best:.3f}x) median {cmed:7.0f} ({cmed / copy_cpu_med:.3f}x) | "
          f"wall {wbest:7.0f} ({wbest / copy_wall_best:.3f}x) median {wmed:7.0f} ({wmed / copy_wall_med:.3f}x)")
