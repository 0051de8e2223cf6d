import json, sys
from onnxcomp.planner.cost_model import LinearFit, codec_features, op_features
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
M = 1 << 20
print("load", a.get("load_average"), b.get("load_average"))
print("op ns/B at 4 MiB traffic:  A | B | B-arena")
for k in sorted(set(a["ops"]) | set(b["ops"]) | set(b.get("ops_arena", {}))):
    def f(t):
        return "%.3f" % (LinearFit.from_dict(t[k]).predict(op_features(4*M, 0)) / (4*M) * 1e9) if k in t else "  -  "
    print(f"  {k:28s} {f(a['ops'])} | {f(b['ops'])} | {f(b.get('ops_arena', {}))}")
print("codec ms at 4 MiB, nz .5 (enc/dec):")
for c in sorted(a["codecs"]):
    r = [LinearFit.from_dict(t["codecs"][c][d]).predict(codec_features(4*M, .5))*1e3 for t in (a, b) for d in ("encode", "decode")]
    print(f"  {c:14s} A {r[0]:.2f}/{r[1]:.2f}  B {r[2]:.2f}/{r[3]:.2f}  ratio {r[2]/r[0]:.2f}/{r[3]/r[1]:.2f}")
print("step_overhead", a["step_overhead"]["coef"], b["step_overhead"]["coef"])
print("profiled", a.get("profiled_model"), b.get("profiled_model"))
