import itertools
exec(open("/tmp/costfit2/fit2.py").read().replace('if __name__ == "__main__":', 'if False:'))
_fit = fit
def fit(train, mode):
    # identifiable keys only: share >= thr of the measured step in >= nmin training rows
    thr, nmin = mode.get("thr", 0.0), mode.get("nmin", 0)
    cnt = {}
    for r in train:
        for g, t in terms(r, mode).items():
            if t / r["measured"] >= thr: cnt[g] = cnt.get(g, 0) + 1
    keep = {g for g, c in cnt.items() if c >= nmin}
    sub = [dict(r, codec={k: v for k, v in r["codec"].items() if any(g in keep for g in terms(dict(r, codec={k: v}), mode))}) for r in train]
    return _fit(sub, mode)
if __name__ == "__main__":
  for arena, dirs, thr, nmin, wround, bounds in itertools.product((False, True), (False, True), (0.0, 0.03, 0.05, 0.1), (4, 8), (True, False), ((0.5, 3.0), (0.33, 3.0))):
    m = dict(dir=dirs, arena=arena, extra=(), wround=wround, lam=0.0, bounds=bounds, thr=thr, nmin=nmin)
    b, a = lor(m)
    B, A = [], []
    for mod in ("resnet18", "mobilenet_v2", "vgg16"):
        test = [r for r in rows if r["model"] == mod]; s = fit([r for r in rows if r["model"] != mod], m)
        B += errs(test, {}, m); A += errs(test, s, m)
    print(f"arena={arena:d} dir={dirs:d} thr={thr:<5} nmin={nmin} wr={wround:d} b={bounds}: LORO {fmt(b)} -> {fmt(a)}   LOMO -> {fmt(st(A))}")
