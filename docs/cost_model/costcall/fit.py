import json, collections, numpy as np
rows = json.load(open(__import__("pathlib").Path(__file__).with_name("calls_rows.json")))
def joint(rs, w_rel=True):
    groups = sorted({(r["codec"], r["role"]) for r in rs})
    X = np.zeros((len(rs), len(groups) + 1)); y = np.zeros(len(rs)); w = np.ones(len(rs))
    for i, r in enumerate(rs):
        X[i, groups.index((r["codec"], r["role"]))] = r["pred"]; X[i, -1] = 1.0; y[i] = r["prof"]
        if w_rel: w[i] = 1.0 / max(r["prof"], 1e-5)
    coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    return dict(zip([f"{c}/{d}" for c, d in groups] + ["per_call"], coef))
for name, sel in [("all", lambda r: True), ("ort", lambda r: r["settings"] == "ort"), ("measure", lambda r: r["settings"] == "measure"),
                  ("quiet costquiet", lambda r: r["src"].startswith("costquiet")), ("loaded costgap", lambda r: r["src"].startswith("costgap")),
                  ("no sz/imask/maxpool", lambda r: r["codec"] not in ("sz", "intervalmask", "maxpool_index"))]:
    rs = [r for r in rows if sel(r)]
    for rel in (True, False):
        c = joint(rs, rel)
        print(f"{name:22s} rel={rel!s:5s} n={len(rs)} per_call {c['per_call']*1e3:.3f} ms  " + " ".join(f"{k} {v:.2f}" for k, v in c.items() if k != "per_call"))
# per-call as a function of size: median(prof - slope*pred) by size bucket using the 'all' rel slopes
c = joint(rows, True)
b = collections.defaultdict(list)
for r in rows:
    k = 1 << max(0, (r["bytes"] - 1).bit_length() - 1)
    b[k].append(r["prof"] - c[f"{r['codec']}/{r['role']}"] * r["pred"])
for k in sorted(b): print(f"~{k/1024:6.0f} KiB n={len(b[k]):4d} median residual after per-codec slope {np.median(b[k])*1e3:.3f} ms")
