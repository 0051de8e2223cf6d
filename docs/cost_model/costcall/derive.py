"""Derive the per-call in-step codec term from stored in-step profiles (calls.py's rows, predicted WITHOUT the term).

Model per codec op i of codec/direction g: profiled_i = s_g * predicted_i + c. The per-group scale s_g takes the
size-proportional part of the gap (sz, intervalmask 1.6-2.3x: codec-specific, not a call cost); c is what every
call pays whatever its codec. s_g by weighted least squares (weights 1/profiled, each op's relative error counts
alike), then c = the median of profiled - s_g * predicted over the ops <= 1 MiB (above that the residual is
dominated by the slope's noise). Prints c, its spread by size and by settings; --write puts it in the shipped
defaults. usage: derive.py ROWS.json [--write DEFAULTS.json]"""
import json, sys, collections
import numpy as np
rows = [r for r in json.load(open(sys.argv[1]))]
groups = sorted({(r["codec"], r["role"]) for r in rows})
X = np.zeros((len(rows), len(groups) + 1)); y = np.array([r["prof"] for r in rows]); w = 1.0 / np.maximum(y, 1e-5)
for i, r in enumerate(rows):
    X[i, groups.index((r["codec"], r["role"]))] = r["pred"]; X[i, -1] = 1.0
coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
scale = dict(zip(groups, coef[:-1]))
res = np.array([r["prof"] - scale[(r["codec"], r["role"])] * r["pred"] for r in rows])
small = np.array([r["bytes"] <= 1 << 20 for r in rows])
c = float(np.median(res[small]))
print(f"joint intercept {coef[-1]*1e3:.3f} ms; median residual <= 1 MiB {c*1e3:.3f} ms "
      f"(p25 {np.percentile(res[small], 25)*1e3:.3f}, p75 {np.percentile(res[small], 75)*1e3:.3f}, n {small.sum()})")
for g, s in scale.items(): print(f"  scale {g[0]}/{g[1]} {s:.2f}")
by = collections.defaultdict(list)
for r, e, sm in zip(rows, res, small):
    if sm: by[("size", 1 << max(0, (r["bytes"] - 1).bit_length() - 1))].append(e); by[("settings", r["settings"])].append(e)
    if sm: by[("src", r["src"])].append(e)
for k in sorted(by, key=str): print(f"  {k}: n {len(by[k])} median {np.median(by[k])*1e3:.3f} ms")
if "--write" in sys.argv:
    p = sys.argv[sys.argv.index("--write") + 1]
    d = json.load(open(p))
    d["codec_call"] = {"seconds": c, "n": int(small.sum()), "p25": float(np.percentile(res[small], 25)),
                       "p75": float(np.percentile(res[small], 75)),
                       "source": "docs/cost_model/costcall/derive.py on stored in-step profiles (costgap p_*/pm_*, "
                                 "costquiet is_*): median of profiled - per-codec scale x calibrated, ops <= 1 MiB"}
    json.dump(d, open(p, "w"), indent=1); open(p, "a").write("\n")
