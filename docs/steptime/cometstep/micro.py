"""sz kernels: old (main's custom_ops/cpu/sz.py at OLD_COMMIT, default df9b1a6) vs new (this tree), on the 17
encoder inputs of one ResNet-18 comet step (/tmp/cometstep/acts.npz from dump_acts.py), interleaved rounds;
checks both give the same bytes (and the NumPy reference on the first tensor). Prints per-round totals over
the 17 tensors (min / median, wall and CPU). usage: micro.py [ROUNDS [EB]]"""
import sys, time, statistics, importlib.util, os
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ab import _old_sz
old_sz = _old_sz(os.environ.get("OLD_COMMIT", "df9b1a6"))
from onnxcomp.custom_ops.cpu import sz as new_sz
from onnxcomp.custom_ops import sz as ref
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
z = np.load("/tmp/cometstep/acts.npz")
ebs = z["ebs"]; acts = [z[f"arr_{i}"] for i in range(len(ebs))]
if len(sys.argv) > 2:  # eb override (e.g. controller-like bounds)
    ebs = np.full(len(ebs), float(sys.argv[2]))
mods = {"old": old_sz, "new": new_sz}
# correctness: identical payloads and decodes; and the NumPy reference's bytes
for a, eb in zip(acts, ebs):
    outs = {k: m.encode_blocks(a, float(eb)) for k, m in mods.items()}
    for k in outs:
        for x, y in zip(outs["old"], outs[k]):
            assert np.array_equal(x, y), k
    r, d, idx = outs["old"]
    y = {k: m.decode_blocks(r, d, a.size, float(eb)) for k, m in mods.items()}
    assert np.array_equal(y["old"].view(np.uint32), y["new"].view(np.uint32))
rr, dd, ii = ref._encode_blocks_cpu(acts[0], float(ebs[0]))
o = new_sz.encode_blocks(acts[0], float(ebs[0]))
assert np.array_equal(rr, o[0]) and np.array_equal(dd, o[1]) and np.array_equal(ii, o[2])
print("bytes identical (old == new == numpy reference on acts[0])")
payloads = [old_sz.encode_blocks(a, float(eb)) for a, eb in zip(acts, ebs)]
res = {(k, d): ([], []) for k in mods for d in ("enc", "dec")}
for r in range(rounds):
    for k in (list(mods) if r % 2 == 0 else list(mods)[::-1]):
        m = mods[k]
        w, c = time.perf_counter(), time.process_time()
        for a, eb in zip(acts, ebs):
            m.encode_blocks(a, float(eb))
        res[(k, "enc")][0].append(time.perf_counter() - w); res[(k, "enc")][1].append(time.process_time() - c)
        w, c = time.perf_counter(), time.process_time()
        for a, eb, (rt, dt, _) in zip(acts, ebs, payloads):
            m.decode_blocks(rt, dt, a.size, float(eb))
        res[(k, "dec")][0].append(time.perf_counter() - w); res[(k, "dec")][1].append(time.process_time() - c)
print("load", os.getloadavg(), "elements", sum(a.size for a in acts))
for (k, d), (w, c) in res.items():
    print(f"{k} {d}: wall min {min(w)*1e3:6.1f} med {statistics.median(w)*1e3:6.1f} ms   CPU min {min(c)*1e3:6.1f} med {statistics.median(c)*1e3:6.1f} ms")
