import json, sys, statistics, os
import numpy as np
rows = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/costfit2/rows_main.json"))
def rid(r):
    b = os.path.basename(r["file"])
    return r["set"] + ":" + ("q" if r["set"] == "Q" else b.split("_")[0])
for r in rows: r["round"] = rid(r)
rounds = sorted({r["round"] for r in rows})
def keyf(r, k, split):
    return k + ("@arena" if r["settings"].startswith("ort") else "") if split else k
def fit(train, lam, split, wround):
    keys = sorted({keyf(r, k, split) for r in train for k in r["codec"]})
    if not keys: return {}
    cnt = {}
    for r in train: cnt[r["round"]] = cnt.get(r["round"], 0) + 1
    A = np.zeros((len(train), len(keys))); e = np.zeros(len(train)); w = np.ones(len(train))
    for i, r in enumerate(train):
        e[i] = r["pred"] / r["measured"] - 1
        for k, t in r["codec"].items(): A[i, keys.index(keyf(r, k, split))] += t / r["measured"]
        if wround: w[i] = 1.0 / cnt[r["round"]]
    sw = np.sqrt(w / w.sum())
    M = np.vstack([A * sw[:, None], np.sqrt(lam) * np.eye(len(keys))])
    b = np.concatenate([-e * sw, np.zeros(len(keys))])
    u = np.linalg.lstsq(M, b, rcond=None)[0]
    return {k: 1 + x for k, x in zip(keys, u)}
def pred(r, s, split):
    return r["pred"] + sum((s.get(keyf(r, k, split), 1.0) - 1) * t for k, t in r["codec"].items())
def stats(rs, s, split):
    errs = [abs(pred(r, s, split) / r["measured"] - 1) for r in rs]
    return sum(x <= .10 for x in errs), len(errs), statistics.mean(errs), max(errs)
def fmt(t): return f"{t[0]}/{t[1]} {t[2]:.1%} {t[3]:.1%}"
def lor(lam, split, wround, verbose=False):
    tot_b = [0, 0]; tot_a = [0, 0]; sb = []; sa = []
    out = []
    for ro in rounds:
        test = [r for r in rows if r["round"] == ro]; train = [r for r in rows if r["round"] != ro]
        s = fit(train, lam, split, wround)
        b = stats(test, {}, split); a = stats(test, s, split)
        tot_b[0] += b[0]; tot_b[1] += b[1]; tot_a[0] += a[0]; tot_a[1] += a[1]
        sb += [abs(pred(r, {}, split) / r["measured"] - 1) for r in test]; sa += [abs(pred(r, s, split) / r["measured"] - 1) for r in test]
        out.append(f"  {ro:10s} before {fmt(b):22s} after {fmt(a)}")
    if verbose: print("\n".join(out))
    print(f"lam={lam} split={split} wround={wround}: before {tot_b[0]}/{tot_b[1]} mean {statistics.mean(sb):.2%} max {max(sb):.1%}  LORO after {tot_a[0]}/{tot_a[1]} mean {statistics.mean(sa):.2%} max {max(sa):.1%}")
if __name__ == "__main__":
    for split in (False, True):
        for wround in (False, True):
            for lam in (0.0, 1e-4, 1e-3, 1e-2):
                lor(lam, split, wround)
    s = fit(rows, 1e-3, False, True)
    print({k: round(v, 3) for k, v in s.items()})
    s = fit(rows, 1e-3, True, True)
    print({k: round(v, 3) for k, v in s.items()})

def folds(lam, split, wround):
    allk = {}
    for ro in rounds:
        s = fit([r for r in rows if r["round"] != ro], lam, split, wround)
        for k, v in s.items(): allk.setdefault(k, []).append(v)
    full = fit(rows, lam, split, wround)
    for k in sorted(allk):
        print(f"   {k:28s} all {full[k]:.3f}  folds {min(allk[k]):.3f}..{max(allk[k]):.3f}")
