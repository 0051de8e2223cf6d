"""Attribute perf page-fault events of the measured step to ORT nodes (profile intervals aligned with PyOp hook
anchors). Usage: RUN.json PERF.data GRAPH BASE"""
import sys, json, bisect, subprocess, statistics, collections, importlib.util
import onnx
run = json.load(open(sys.argv[1]))
spec = importlib.util.spec_from_file_location("fs", "/work/wt/pinfault/tools/fault_sources.py")
fs = importlib.util.module_from_spec(spec); spec.loader.exec_module(fs)
graph = onnx.load(sys.argv[3], load_external_data=False).graph
bnames = {n.name for n in onnx.load(sys.argv[4], load_external_data=False).graph.node}
byname = {n.name: n for n in graph.node}
ev = json.load(open(run["profiles"][0]))
nodes = [e for e in ev if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
nodes.sort(key=lambda e: e["ts"])
# the last step: the last len(graph nodes)-ish events; split steps by the first node's name recurring
first = nodes[0]["name"]
starts = [i for i, e in enumerate(nodes) if e["name"] == first]
last = nodes[starts[-1]:]
pyop = [e for e in last if e["args"].get("op_name", "").startswith("Onnxcomp")]
anchors = run["anchors"]
assert len(pyop) == len(anchors), (len(pyop), len(anchors))
# no PyOps: align the step's first node with the step's start (error: the time before ORT's first kernel)
# decoders only where there are any: an encoder's hook starts after the bridge copied its (large) input
pairs = [(a, e) for a, e in zip(anchors, pyop) if a[1].startswith("OnnxcompDecode")] or list(zip(anchors, pyop))
offs = [a[0] - e["ts"] for a, e in pairs] or [run["t0"] - last[0]["ts"]]
off = statistics.median(offs)
print(f"nodes in last step {len(last)}; offset spread {min(offs)-off:+.0f} .. {max(offs)-off:+.0f} us")
st = [e["ts"] + off for e in last]
txt = subprocess.run(["perf", "script", "-i", sys.argv[2], "-F", "time"], capture_output=True, text=True).stdout
times = [float(l.strip().rstrip(":")) * 1e6 for l in txt.split() if l.strip()]
acc = collections.Counter(); kinds = collections.Counter()
inwin = 0
for t in times:
    if not (run["t0"] <= t <= run["t1"]):
        continue
    inwin += 1
    i = bisect.bisect_right(st, t) - 1
    if i >= 0 and t <= st[i] + last[i]["dur"] + 2:
        nm = last[i]["name"][: -len("_kernel_time")]
        n = byname.get(nm)
        src = fs.source_of(n, bnames) if n is not None else f"(node not in graph: {last[i]['args'].get('op_name')})"
        acc[src] += 1
    else:
        acc["outside node kernels (framework, optimizer, Python)"] += 1
print(f"faults in the step window: {inwin}")
for k, v in acc.most_common():
    print(f"  {k:78s} {v/1e3:7.1f} K")

if len(sys.argv) > 5:
    json.dump(dict(acc), open(sys.argv[5], "w"))
