import itertools
exec(open("/tmp/costfit2/fit2.py").read().replace('if __name__ == "__main__":', 'if False:'))
_fit = fit
def fit(train, mode):
    only = mode["only"]
    sub = [dict(r, codec={k: v for k, v in r["codec"].items() if k.split("/")[0] in only}) for r in train]
    return _fit(sub, mode)
def lomo(m):
    B, A = [], []; per = []
    for mod in ("resnet18", "mobilenet_v2", "vgg16"):
        test = [r for r in rows if r["model"] == mod]; s = fit([r for r in rows if r["model"] != mod], m)
        b_, a_ = errs(test, {}, m), errs(test, s, m); B += b_; A += a_; per.append(f"{mod} {fmt(st(b_))}->{fmt(st(a_))}")
    return st(A), per
if __name__ == "__main__":
  for only in (("dpr_fp8",), ("intervalmask",), ("dpr_fp8", "intervalmask"), ("dpr_fp8", "intervalmask", "zfp"), ("dpr_fp8", "intervalmask", "zfp", "sz")):
   for arena in (False, True):
    m = dict(dir=False, arena=arena, extra=(), wround=True, lam=0.0, bounds=(0.5, 3.0), only=only)
    b, a = lor(m); l, per = lomo(m)
    print(f"{'+'.join(only):36s} arena={arena:d}: LORO {fmt(b)} -> {fmt(a)}  LOMO -> {fmt(l)}  | all: " + ", ".join(f"{k} {v:.2f}" for k, v in fit(rows, m).items()))
    print("      ", " | ".join(per))
