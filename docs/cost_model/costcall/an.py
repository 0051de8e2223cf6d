import json, collections, numpy as np
rows = json.load(open(__import__("pathlib").Path(__file__).with_name("calls_rows.json")))
print(collections.Counter((r["src"], r["graph"]) for r in rows))
b = collections.defaultdict(list)
for r in rows:
    k = 1 << max(0, (r["bytes"] - 1).bit_length() - 1)
    b[(r["codec"], r["role"], k)].append(r["prof"] - r["pred"])
print("codec role  ~KiB  n  median(prof-pred) ms  p25 p75   median pred  median prof")
for key in sorted(b):
    v = np.array(b[key]) * 1e3
    rs = [r for r in rows if (r["codec"], r["role"]) == key[:2] and (1 << max(0, (r["bytes"] - 1).bit_length() - 1)) == key[2]]
    print(f"{key[0]:13s} {key[1]:6s} {key[2]/1024:7.0f} {len(v):3d} {np.median(v):7.3f} {np.percentile(v,25):7.3f} {np.percentile(v,75):7.3f}   {np.median([r['pred'] for r in rs])*1e3:7.3f} {np.median([r['prof'] for r in rs])*1e3:7.3f}")
