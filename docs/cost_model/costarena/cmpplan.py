"""Compare two transform --json outputs of the auto planner: per-tensor choice, predicted peak, step seconds."""
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def choices(d):
    out = {}
    for t in d.get("tensors", []) if isinstance(d.get("tensors"), list) else []:
        out[t.get("name") or t.get("tensor")] = t.get("technique") or t.get("choice") or t.get("encoding") or t.get("action")
    return out
au, bu = a.get("auto", {}), b.get("auto", {})
for k in sorted(set(au) | set(bu)):
    va, vb = au.get(k), bu.get(k)
    if isinstance(va, (int, float, str, bool)) or va is None:
        print(f"  auto.{k}: {va} | {vb}" + ("" if va == vb else "   <-- differs"))
ca, cb = choices(a), choices(b)
diff = {k: (ca.get(k), cb.get(k)) for k in set(ca) | set(cb) if ca.get(k) != cb.get(k)}
print(f"  tensors: {len(ca)} | {len(cb)}; choices differing: {len(diff)}")
for k, v in sorted(diff.items())[:40]:
    print(f"    {k}: {v[0]} -> {v[1]}")
for key in ("encoded", "plan"):
    if a.get(key) != b.get(key):
        print(f"  {key} differs")
