"""A/B: old (/tmp copy of main's _zfp_numba.py) vs this tree's kernels, called directly, interleaved rounds;
CPU time per copy CPU time (64 MiB np.copyto on all cores, same rounds). Payload bytes asserted equal first."""
import importlib.util, os, sys, time, statistics, argparse
import numpy as np
from concurrent.futures import ThreadPoolExecutor
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu
cpu.threading_layer()
from onnxcomp.custom_ops import _zfp_numba as new
ap = argparse.ArgumentParser()
ap.add_argument("tensor"); ap.add_argument("--rates", type=int, nargs="+", default=[8]); ap.add_argument("--rounds", type=int, default=11)
ap.add_argument("--old", default="/tmp/zfpfast/_zfp_numba_old.py")
a = ap.parse_args()
sys.path.insert(0, os.path.dirname(a.old)); old = importlib.import_module(os.path.basename(a.old)[:-3])
x = np.load(a.tensor); lay = zfp.layout_of(x.shape); flat = x.reshape(-1)
variants = {}
for rate in a.rates:
    nw = zfp.data_words(lay, rate)
    for tag, mod in (("old", old), ("new", new)):
        def e(mod=mod, rate=rate, nw=nw, tag=tag):
            words = np.zeros(nw, np.uint32) if tag == "old" else np.empty(nw, np.uint32)
            mod.encode(flat, flat.size, lay.height, lay.width, lay.nblocks, lay.two_d, rate, 26, 9, 149, words)
            return words
        variants[f"r{rate} enc {tag}"] = e
    wa = variants[f"r{rate} enc old"](); wb = variants[f"r{rate} enc new"]()
    assert np.array_equal(wa, wb), f"payloads differ at rate {rate}"
    for tag, mod in (("old", old), ("new", new)):
        def d(mod=mod, rate=rate, wa=wa):
            y = np.empty(flat.size, np.float32)
            assert mod.decode(wa, flat.size, lay.height, lay.width, lay.nblocks, lay.two_d, rate, 26, 9, 149, y)
            return y
        variants[f"r{rate} dec {tag}"] = d
    assert np.array_equal(variants[f"r{rate} dec old"]().view(np.uint32), variants[f"r{rate} dec new"]().view(np.uint32))
src = np.random.default_rng(0).random((64 << 20) // 4, dtype=np.float32); dst = np.empty_like(src)
cores = os.cpu_count(); bounds = np.linspace(0, src.size, cores + 1).astype(int); pool = ThreadPoolExecutor(cores)
def copy():
    list(pool.map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]]), range(cores)))
for f in variants.values(): f()
copy()
res = {k: ([], []) for k in ["copy", *variants]}
t_start = time.time()
for r in range(a.rounds):
    items = [("copy", copy), *variants.items()]
    if r % 2: items = items[::-1]
    for k, f in items:
        t, c = time.perf_counter(), time.process_time()
        f()
        res[k][0].append(time.perf_counter() - t); res[k][1].append(time.process_time() - c)
print(f"tensor {a.tensor} {x.shape}; {a.rounds} rounds in {time.time() - t_start:.0f} s; load {os.getloadavg()}; threads {os.environ.get('NUMBA_NUM_THREADS', 'all')}")
cb = src.nbytes / 1e6
cc_best = cb / min(res["copy"][1]); cc_med = cb / statistics.median(res["copy"][1])
cw_best = cb / min(res["copy"][0]); cw_med = cb / statistics.median(res["copy"][0])
print(f"copy: {cc_best:.0f} MB/CPU-s best, {cc_med:.0f} median; wall {cw_best:.0f} best, {cw_med:.0f} median")
mb = x.nbytes / 1e6
for k in variants:
    w, c = res[k]
    cbest, cmed = mb / min(c), mb / statistics.median(c)
    wbest, wmed = mb / min(w), mb / statistics.median(w)
    print(f"{k:14s} CPU {cbest:6.0f} MB/s ({cbest / cc_best:.3f}x) median {cmed:6.0f} ({cmed / cc_med:.3f}x) | "
          f"wall {wbest:6.0f} ({wbest / cw_best:.3f}x) median {wmed:6.0f} ({wmed / cw_med:.3f}x) | {min(c) / lay.nblocks * 1e9:.1f} ns CPU/block")
