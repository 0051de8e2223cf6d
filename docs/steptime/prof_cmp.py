"""Profile baseline + transformed graphs (fresh child each, measure's allocator pin unless --glibc) and print
per-op-type totals and the new/kept node split. usage: prof_cmp.py DIR graph1 graph2 ... [--glibc]"""
import sys, os, json, collections
sys.path.insert(0, "/work/wt-steptime")
args = [a for a in sys.argv[1:] if not a.startswith("--")]
glibc = "--glibc" in sys.argv
if glibc:
    import onnxcomp.runtime.measure as m
    m.MALLOC_ENV.clear() if isinstance(m.MALLOC_ENV, dict) else None
from onnxcomp.planner.cost_model import profile_node_seconds
d = args[0]
res = {}
for g in args[1:]:
    nt = profile_node_seconds(os.path.join(d, g), steps=int(os.environ.get("PSTEPS", "2")), warmup=1)
    res[g] = nt
    json.dump(nt.to_dict(), open(f"/tmp/steptime/prof/{os.path.basename(d)}-{g}{'-glibc' if glibc else ''}.json", "w"))
base = res[args[1]]
print("load", os.getloadavg())
for g, nt in res.items():
    bytype = collections.defaultdict(float); cnt = collections.Counter()
    kept = new = 0.0
    for n, t in nt.items():
        op = nt.features.get(n, ("?",))[0]
        bytype[op] += t; cnt[op] += 1
        if n in base: kept += t
        else: new += t
    print(f"== {g}: step {nt.step_seconds:.3f}s  nodes {sum(nt.values()):.3f}s overhead {nt.overhead_seconds:.3f}s kept {kept:.3f} (base {sum(base.values()):.3f}) new {new:.3f}")
    for op, t in sorted(bytype.items(), key=lambda kv: -kv[1])[:14]:
        print(f"   {op:28s} {cnt[op]:4d} {t*1e3:8.1f} ms")
