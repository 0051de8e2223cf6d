# target: error relative to the same chunk's baseline (drift common to a chunk removed)
import itertools
exec(open("/tmp/costfit2/fit2.py").read().replace('if __name__ == "__main__":', 'if False:'))
base = {}
for r in rows:
    if r["graph"] == "training_model.onnx": base[(r["file"], r["run"])] = r["pred"] / r["measured"]
for r in rows: r["bratio"] = base.get((r["file"], r["run"]), 1.0)
def fitn(train, mode):
    keys = sorted({g for r in train for g in terms(r, mode)})
    if not keys: return {}
    cnt = {}
    for r in train: cnt[r["round"]] = cnt.get(r["round"], 0) + 1
    A = np.zeros((len(train), len(keys))); e = np.zeros(len(train)); w = np.ones(len(train))
    for i, r in enumerate(train):
        m = r["measured"] * r["bratio"]   # the measured step as the baseline's prediction error would have it
        e[i] = r["pred"] / m - 1
        for g, t in terms(r, mode).items(): A[i, keys.index(g)] += t / m
        if mode["wround"]: w[i] = 1.0 / cnt[r["round"]]
    sw = np.sqrt(w / w.sum())
    lo, hi = mode["bounds"]
    u = lsq_linear(A * sw[:, None], -e * sw, bounds=(lo - 1, hi - 1)).x
    return {k: 1 + x for k, x in zip(keys, u)}
fit = fitn
if __name__ == "__main__":
  for arena, dirs, wround in itertools.product((False, True), (False, True), (True, False)):
    m = dict(dir=dirs, arena=arena, extra=(), wround=wround, lam=0.0, bounds=(0.5, 3.0))
    b, a = lor(m)
    B, A = [], []
    for mod in ("resnet18", "mobilenet_v2", "vgg16"):
        test = [r for r in rows if r["model"] == mod]; s = fit([r for r in rows if r["model"] != mod], m)
        B += errs(test, {}, m); A += errs(test, s, m)
    print(f"arena={arena:d} dir={dirs:d} wr={wround:d}: LORO {fmt(b)} -> {fmt(a)}   LOMO -> {fmt(st(A))}  all-data: " + ", ".join(f"{k} {v:.2f}" for k, v in fit(rows, m).items()))
