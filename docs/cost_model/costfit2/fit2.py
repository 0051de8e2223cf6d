import json, sys, statistics, os, itertools
import numpy as np
from scipy.optimize import lsq_linear
rows = json.load(open("/tmp/costfit2/rows_main.json"))
def rid(r):
    b = os.path.basename(r["file"]); return r["set"] + ":" + ("q" if r["set"] == "Q" else b.split("_")[0])
for r in rows: r["round"] = rid(r)
rounds = sorted({r["round"] for r in rows})
def terms(r, mode):
    """fitted groups -> predicted seconds"""
    out = {}
    for k, t in r["codec"].items():
        if k.startswith("new:"):
            if k[4:] in mode["extra"]: g = k
            else: continue
        else:
            c, d = k.split("/")
            g = k if mode["dir"] else c
            if mode["arena"] and r["settings"].startswith("ort"): g += "@arena"
        out[g] = out.get(g, 0.0) + t
    return out
def fit(train, mode):
    keys = sorted({g for r in train for g in terms(r, mode)})
    if not keys: return {}
    cnt = {}
    for r in train: cnt[r["round"]] = cnt.get(r["round"], 0) + 1
    A = np.zeros((len(train), len(keys))); e = np.zeros(len(train)); w = np.ones(len(train))
    for i, r in enumerate(train):
        e[i] = r["pred"] / r["measured"] - 1
        for g, t in terms(r, mode).items(): A[i, keys.index(g)] += t / r["measured"]
        if mode["wround"]: w[i] = 1.0 / cnt[r["round"]]
    sw = np.sqrt(w / w.sum()); lam = mode["lam"]
    M = np.vstack([A * sw[:, None], np.sqrt(lam) * np.eye(len(keys))]) if lam else A * sw[:, None]
    b = np.concatenate([-e * sw, np.zeros(len(keys))]) if lam else -e * sw
    lo, hi = mode["bounds"]
    u = lsq_linear(M, b, bounds=(lo - 1, hi - 1)).x
    return {k: 1 + x for k, x in zip(keys, u)}
def pred(r, s, mode, codec_only=False):
    return r["pred"] + sum((s.get(g, 1.0) - 1) * t for g, t in terms(r, mode).items() if not (codec_only and g.startswith("new:")))
def errs(rs, s, mode, co=False): return [pred(r, s, mode, co) / r["measured"] - 1 for r in rs]
def st(es):
    a = [abs(x) for x in es]; return sum(x <= .10 for x in a), len(a), statistics.mean(a), max(a)
def fmt(t): return f"{t[0]}/{t[1]} {t[2]:.1%} {t[3]:.1%}"
def lor(mode, verbose=False, co=False):
    B, Aft = [], []; lines = []
    for ro in rounds:
        test = [r for r in rows if r["round"] == ro]; s = fit([r for r in rows if r["round"] != ro], mode)
        b = errs(test, {}, mode); a = errs(test, s, mode, co); B += b; Aft += a
        lines.append(f"  {ro:8s} before {fmt(st(b)):22s} after {fmt(st(a))}")
    if verbose: print("\n".join(lines))
    return st(B), st(Aft)
MODES = {}
base = dict(dir=False, arena=False, extra=(), wround=True, lam=0.0, bounds=(0.5, 3.0))
if __name__ == "__main__":
    for dirs, arena, extra, wround, lam, bounds in itertools.product((False, True), (False, True), ((), ("halfcast",), ("halfcast", "other")), (True, False), (0.0, 1e-4, 1e-3), ((0.5, 3.0), (0.25, 4.0))):
        m = dict(dir=dirs, arena=arena, extra=extra, wround=wround, lam=lam, bounds=bounds)
        b, a = lor(m)
        print(f"dir={dirs:d} arena={arena:d} extra={'+'.join(extra) or '-':16s} wr={wround:d} lam={lam:<6} b={bounds}: before {fmt(b)}  LORO {fmt(a)}")
