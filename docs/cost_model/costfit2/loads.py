import json, pickle, sys, os
from pathlib import Path
import numpy as np
S = pickle.load(open(sys.argv[1], "rb"))
args = sys.argv[3:]; files = [a for a in args if a.endswith(".json")]
loads = []
for path in files:
    data = json.loads(Path(path).read_text())
    for key, entry in data.get("runs", {}).items():
        if "profile" not in entry: continue
        art = Path(entry["dir"])
        for g, rec in sorted(entry["graphs"].items()):
            if "measured_s" not in rec or not (art / g).exists(): continue
            l = rec.get("load") or [entry.get("profile_load")]
            loads.append(l[0] if l and l[0] is not None else float("nan"))
assert len(loads) == len(S), (len(loads), len(S))
out = [(s, l) for s, l in zip(S, loads)]
pickle.dump(out, open(sys.argv[2], "wb"))
# error vs load per codec-heavy class
import collections
cls = collections.defaultdict(list)
for s, l in out:
    share = {}
    for (c, d), t in s.codec.items(): share[c] = share.get(c, 0) + t / s.measured
    main = max(share, key=share.get) if share else "none"
    if share and share[main] < 0.05: main = "minor"
    cls[(main, s.arena)].append((l, s.base / s.measured - 1))
for k in sorted(cls):
    v = np.array([x for x in cls[k] if x[0] == x[0]])
    if len(v) < 4: continue
    lo = v[v[:, 0] < 3.5][:, 1]; hi = v[v[:, 0] >= 3.5][:, 1]
    r = np.corrcoef(v[:, 0], v[:, 1])[0, 1]
    print(f"{k[0]:13s} arena={k[1]:d} n={len(v):3d} corr(load, err) {r:+.2f}  load<3.5: n={len(lo):2d} mean err {lo.mean() if len(lo) else float('nan'):+.1%}   load>=3.5: n={len(hi):2d} mean err {hi.mean() if len(hi) else float('nan'):+.1%}")
