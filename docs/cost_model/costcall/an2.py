import json, collections, numpy as np
rows = json.load(open(__import__("pathlib").Path(__file__).with_name("calls_rows.json")))
g = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0, 0.0]))
for r in rows:
    x = g[(r["src"].split("/")[-1][:14], r["graph"])][r["codec"]]; x[0] += 1; x[1] += r["pred"]; x[2] += r["prof"]
for k, v in g.items():
    print(k, "  ".join(f"{c}: n={n} pred {p*1e3:.0f} prof {t*1e3:.0f} ms (gap {1e3*(t-p):.0f})" for c, (n, p, t) in v.items()))
# settings split for bitmask small / intervalmask
for codec in ("bitmask", "intervalmask", "dpr_fp8", "sz"):
  for st in ("ort", "measure"):
    for role in ("encode", "decode"):
        rs = [r for r in rows if r["codec"] == codec and r["settings"] == st and r["role"] == role]
        if not rs: continue
        small = [r["prof"] - r["pred"] for r in rs if r["bytes"] <= 256 * 1024]
        big = [r["prof"] / r["pred"] for r in rs if r["bytes"] > 256 * 1024]
        print(codec, st, role, "small n", len(small), "median gap ms %.3f" % (1e3 * np.median(small)) if small else "", "big n", len(big), "median ratio %.2f" % np.median(big) if big else "")
