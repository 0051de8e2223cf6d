"""Profile graphs (fresh child each via profile_node_seconds) -> json per graph + op-type totals.
usage: prof.py DIR TAG graph1 graph2 ...  (allocator: measure's pin unless env GLIBC=1)"""
import sys, os, json, collections
from onnxcomp.planner.cost_model import profile_node_seconds
d, tag, graphs = sys.argv[1], sys.argv[2], sys.argv[3:]
if os.environ.get("GLIBC"):
    import onnxcomp.runtime.measure as m
    if isinstance(getattr(m, "MALLOC_ENV", None), dict): m.MALLOC_ENV.clear()
res = {}
for g in graphs:
    nt = profile_node_seconds(os.path.join(d, g), steps=int(os.environ.get("PSTEPS", "3")), warmup=1)
    res[g] = nt
    json.dump(nt.to_dict(), open(f"/tmp/steptime/prof/{tag}-{g}.json", "w"))
base = res[graphs[0]]
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
    for op, t in sorted(bytype.items(), key=lambda kv: -kv[1])[:18]:
        print(f"   {op:28s} {cnt[op]:4d} {t*1e3:8.1f} ms")
