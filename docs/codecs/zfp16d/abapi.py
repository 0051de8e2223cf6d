"""A/B through the codec API (ZFP.encode / ZFP.decode, as the PyOps call them): main's kernels (a copy of
a59e294's custom_ops/_zfp_numba.py, --old) vs this tree's, swapped in behind zfp._compiled(); interleaved
rounds (odd rounds reversed), process CPU time per call as a fraction of the same rounds' 64 MiB np.copyto on
all cores; sz (eb = 1e-2 x range) encode / decode in the same rounds for the record. Payload words and decoded
bits of old and new are asserted equal before timing."""
import argparse, importlib, os, statistics, sys, time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
import numpy as np
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu, get_codec
cpu.threading_layer()
from onnxcomp.custom_ops import _zfp_numba as new

ap = argparse.ArgumentParser()
ap.add_argument("tensor"); ap.add_argument("--rates", type=int, nargs="+", default=[4, 8, 16])
ap.add_argument("--rounds", type=int, default=21); ap.add_argument("--old", default="/tmp/zfp16d/zfp_main_kernels.py")
ap.add_argument("--no-sz", action="store_true")
a = ap.parse_args()
sys.path.insert(0, os.path.dirname(a.old)); old = importlib.import_module(os.path.basename(a.old)[:-3])
K = {tag: SimpleNamespace(encode=cpu._locked(m.encode), decode=cpu._locked(m.decode)) for tag, m in (("old", old), ("new", new))}
zfp._compiled()  # first call sets the module global; we swap it per variant below
x = np.load(a.tensor)
Z = zfp.ZFP()
V = {}
for rate in a.rates:
    pl = {}
    for tag in ("old", "new"):
        zfp._zfp_numba = K[tag]
        pl[tag] = Z.encode(x, rate=rate)
    assert all(np.array_equal(np.asarray(p), np.asarray(q)) for p, q in zip(pl["old"], pl["new"])), f"payload rate {rate}"
    ys = {}
    for tag in ("old", "new"):
        zfp._zfp_numba = K[tag]
        ys[tag] = np.asarray(Z.decode(pl["old"]))
    assert np.array_equal(ys["old"].view(np.uint32), ys["new"].view(np.uint32)), f"decode rate {rate}"
    for tag in ("old", "new"):
        def e(tag=tag, rate=rate):
            zfp._zfp_numba = K[tag]
            return Z.encode(x, rate=rate)
        def d(tag=tag, p=pl["old"]):
            zfp._zfp_numba = K[tag]
            return Z.decode(p)
        V[f"zfp r{rate} enc {tag}"] = e
        V[f"zfp r{rate} dec {tag}"] = d
if not a.no_sz:
    S = get_codec("sz"); eb = float(1e-2 * (x.max() - x.min()))
    ps = S.encode(x, eb=eb)
    V["sz enc"] = lambda: S.encode(x, eb=eb)
    V["sz dec"] = lambda: S.decode(ps, eb=eb)
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
print(f"{a.tensor} {x.shape}; {a.rounds} rounds in {time.time() - t0:.0f} s; load before {tuple(round(v, 2) for v in l0)} "
      f"after {tuple(round(v, 2) for v in os.getloadavg())}; MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_')}; "
      f"threads {os.environ.get('NUMBA_NUM_THREADS', 'all')} of {cores}")
cb = src.nbytes / 1e6
cc = cb / min(res["copy"][1]); ccm = cb / statistics.median(res["copy"][1])
print(f"copy: {cc:.0f} MB/CPU-s best, {ccm:.0f} median; wall {cb / min(res['copy'][0]):.0f} best")
mb = x.nbytes / 1e6; nblocks = zfp.layout_of(x.shape).nblocks
for k in V:
    w, c = res[k]
    b, m = mb / min(c), mb / statistics.median(c)
    print(f"{k:18s} CPU {b:6.0f} MB/s ({b / cc:.3f}x) median {m:6.0f} ({m / ccm:.3f}x) | {min(c) * 1e3:6.2f} ms CPU best, "
          f"{min(w) * 1e3:6.2f} ms wall best | {min(c) / nblocks * 1e9:5.1f} ns CPU/block")
