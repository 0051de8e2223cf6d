"""Per-op-type profile of graphs in one process (interleaved steps, one intra-op thread): ORT profiler + Python timers on the sz codec/kernel/PyOp-hook calls. usage: prof.py DIR STEPS WARMUP graph...  (profiles under /tmp/cometstep/prof)"""
import sys, os, time, json, collections, statistics, gc
from pathlib import Path
d = Path(sys.argv[1]); steps = int(sys.argv[2]); warmup = int(sys.argv[3]); graphs = sys.argv[4:]
import onnxruntime as ort
ort.set_default_logger_severity(3)
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.calibrate import read_profile
from onnxcomp.custom_ops import cpu, get_codec
print("imports done", flush=True)
cpu.warm_up()
print("warm done", flush=True)
sz = get_codec("sz")
T = collections.defaultdict(float); N = collections.Counter()
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[label] += time.perf_counter() - t; N[label] += 1; return r
    setattr(obj, name, g)
wrap(sz, "encode_cpu", "sz.encode_cpu"); wrap(sz, "decode_cpu", "sz.decode_cpu")
import onnxcomp.custom_ops.cpu.sz as ksz
k = cpu.kernels("sz")
wrap(k, "encode_blocks", "kern.encode_blocks"); wrap(k, "decode_blocks", "kern.decode_blocks")
from onnxcomp.runtime import pyops
orig_hook = pyops._fast_hook
from onnxruntime_extensions import Opdef, PyCustomOpDef
def hook(k_id, feed, attributes):
    t = time.perf_counter(); r = orig_hook(k_id, feed, attributes)
    op = Opdef._odlist.get(k_id); T["hook:" + op.op_type] += time.perf_counter() - t; N["hook:" + op.op_type] += 1
    return r
PyCustomOpDef.install_hooker(hook)
sess = []
for i, g in enumerate(graphs):
    pdir = Path(f"/tmp/cometstep/prof/{i}"); pdir.mkdir(parents=True, exist_ok=True)
    for p in pdir.glob("*.json"): p.unlink()
    s = open_artifact_session(d, d / g, settings=RuntimeSettings(intra_threads=1, profile=str(pdir / "p")), seed=0)
    spec = graph_data(d, d / g, list(s.module.input_names()))
    sess.append((g, s, synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype), pdir))
wall = collections.defaultdict(list); cput = collections.defaultdict(list)
snap = {}
for r in range(warmup + steps):
    print("round", r, time.perf_counter(), flush=True)
    if r == warmup:
        T.clear(); N.clear()
    for g, s, b, _ in sess:
        x, y = next(b)
        w, c = time.perf_counter(), time.process_time()
        s.step(x, y)
        if r >= warmup:
            wall[g].append(time.perf_counter() - w); cput[g].append(time.process_time() - c)
print("load", os.getloadavg())
for g, s, b, pdir in sess:
    s.close()
gc.collect()
base = None
for g, s, b, pdir in sess:
    per = collections.defaultdict(list); ops = {}
    for p in sorted(pdir.glob("*.json")):
        ev = read_profile(p)
        if not ev or len(ev) < 50: continue
        for e in ev:
            per[e["node"]].append(e["dur_s"]); ops[e["node"]] = e["op"]
    runs = warmup + steps
    mean = {n: statistics.fmean(v[warmup:]) for n, v in per.items() if len(v) >= runs}
    bytype = collections.defaultdict(float); cnt = collections.Counter()
    for n, t in mean.items():
        bytype[ops[n]] += t; cnt[ops[n]] += 1
    print(f"== {g}: wall med {statistics.median(wall[g]):.3f} min {min(wall[g]):.3f}  cpu med {statistics.median(cput[g]):.3f} min {min(cput[g]):.3f}  nodes sum {sum(mean.values()):.3f}")
    for op, t in sorted(bytype.items(), key=lambda kv: -kv[1]):
        bt = base[op] if base else 0
        print(f"   {op:30s} {cnt[op]:4d} {t*1e3:8.1f} ms  (base {bt*1e3:7.1f})")
    if base is None: base = collections.defaultdict(float, bytype)
    json.dump({"mean": mean, "ops": ops}, open(pdir / "summary.json", "w"))
print("python timers (per step):")
for k2 in sorted(T): print(f"   {k2:40s} {N[k2]/steps:6.1f} calls  {T[k2]/steps*1e3:8.2f} ms")
