import sys
exec(open("/tmp/costfit2/fit2.py").read().replace('if __name__ == "__main__":', 'if False:'))
m = dict(dir=False, arena=False, extra=(), wround=True, lam=0.0, bounds=(0.5, 3.0))
b, a = lor(m, verbose=True); print("LORO", fmt(b), "->", fmt(a))
allk = {}
for ro in rounds:
    for k, v in fit([r for r in rows if r["round"] != ro], m).items(): allk.setdefault(k, []).append(v)
full = fit(rows, m)
for k in sorted(full): print(f"   {k:16s} all {full[k]:.3f}  LORO folds {min(allk[k]):.3f}..{max(allk[k]):.3f}")
# leave one model out
B, A = [], []
for mod in ("resnet18", "mobilenet_v2", "vgg16"):
    test = [r for r in rows if r["model"] == mod]; s = fit([r for r in rows if r["model"] != mod], m)
    b_, a_ = errs(test, {}, m), errs(test, s, m); B += b_; A += a_
    print(f"  LOMO {mod:13s} before {fmt(st(b_))}  after {fmt(st(a_))}   scales {', '.join(f'{k} {v:.2f}' for k, v in s.items())}")
print("LOMO", fmt(st(B)), "->", fmt(st(A)))
# named graphs in Q (LORO fold Q)
s = fit([r for r in rows if r["round"] != "Q:q"], m)
for r in rows:
    if r["round"] == "Q:q":
        e0 = r["pred"] / r["measured"] - 1; e1 = pred(r, s, m) / r["measured"] - 1
        print(f"   Q {r['model']:13s} {r['settings']:12s} {r['graph']:22s} {e0:+.1%} -> {e1:+.1%}" + ("  *" if abs(e0) > .1 or abs(e1) > .1 else ""))
