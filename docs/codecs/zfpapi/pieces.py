"""Where does ZFP.encode/decode spend its time beyond the kernel? One process, interleaved rounds.
Variants: bare kernel with a reused output buffer, bare kernel with a fresh np.empty output, encode_cpu,
ZFP.encode (the public API); same for decode. CPU time per call, best / median, MB per CPU s and x copy."""
import argparse, os, statistics, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu
cpu.threading_layer()
from onnxcomp.custom_ops import _zfp_numba as K

ap = argparse.ArgumentParser()
ap.add_argument("tensor"); ap.add_argument("--rates", type=int, nargs="+", default=[8]); ap.add_argument("--rounds", type=int, default=15)
ap.add_argument("--only", default="")
a = ap.parse_args()
x = np.load(a.tensor); lay = zfp.layout_of(x.shape); flat = x.reshape(-1)
Z = zfp.ZFP()
V = {}
for rate in a.rates:
    nw = zfp.data_words(lay, rate)
    kargs = (flat.size, lay.height, lay.width, lay.nblocks, lay.two_d, rate, 26, 9, 149)
    wpre = np.empty(nw, np.uint32)
    ypre = np.empty(flat.size, np.float32)
    def kenc_pre(kargs=kargs, wpre=wpre):
        K.encode(flat, *kargs, wpre)
    def kenc_fresh(kargs=kargs, nw=nw):
        w = np.empty(nw, np.uint32); K.encode(flat, *kargs, w); return w
    payload = Z.encode(x, rate=rate)
    words = payload[1]
    def kdec_pre(kargs=kargs, words=words, ypre=ypre):
        K.decode(words, *kargs, ypre)
    def kdec_fresh(kargs=kargs, words=words):
        y = np.empty(flat.size, np.float32); K.decode(words, *kargs, y); return y
    V[f"r{rate} enc kernel reused-out"] = kenc_pre
    V[f"r{rate} enc kernel fresh-out"] = kenc_fresh
    V[f"r{rate} enc encode_cpu"] = lambda rate=rate: Z.encode_cpu(x, rate=rate)
    V[f"r{rate} enc ZFP.encode"] = lambda rate=rate: Z.encode(x, rate=rate)
    V[f"r{rate} dec kernel reused-out"] = kdec_pre
    V[f"r{rate} dec kernel fresh-out"] = kdec_fresh
    V[f"r{rate} dec ZFP.decode"] = lambda payload=payload: Z.decode(payload)
if a.only:
    V = {k: v for k, v in V.items() if a.only in k}
src = np.random.default_rng(0).random((64 << 20) // 4, dtype=np.float32); dst = np.empty_like(src)
cores = os.cpu_count(); bnd = np.linspace(0, src.size, cores + 1).astype(int); pool = ThreadPoolExecutor(cores)
def copy():
    list(pool.map(lambda i: np.copyto(dst[bnd[i]:bnd[i + 1]], src[bnd[i]:bnd[i + 1]]), range(cores)))
for f in V.values(): f()
copy()
res = {k: ([], []) for k in ["copy", *V]}
t0 = time.time(); l0 = os.getloadavg()
for r in range(a.rounds):
    items = [("copy", copy), *V.items()]
    if r % 2: items = items[::-1]
    for k, f in items:
        t, c = time.perf_counter(), time.process_time()
        f()
        res[k][0].append(time.perf_counter() - t); res[k][1].append(time.process_time() - c)
print(f"{a.tensor} {x.shape}; {a.rounds} rounds in {time.time() - t0:.0f} s; load before {l0} after {os.getloadavg()}; "
      f"MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_')}")
cb = src.nbytes / 1e6
cc = cb / min(res["copy"][1]); ccm = cb / statistics.median(res["copy"][1])
print(f"copy: {cc:.0f} MB/CPU-s best, {ccm:.0f} median; wall {cb / min(res['copy'][0]):.0f} best")
mb = x.nbytes / 1e6
for k in V:
    w, c = res[k]
    b, m = mb / min(c), mb / statistics.median(c)
    print(f"{k:28s} CPU {b:6.0f} MB/s ({b / cc:.3f}x) median {m:6.0f} ({m / ccm:.3f}x) | {min(c) * 1e3:6.2f} ms CPU best, "
          f"{min(w) * 1e3:6.2f} ms wall best")
