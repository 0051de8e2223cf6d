import json, sys, collections
d = json.load(open(sys.argv[1])); bases = d["profiles"]["training_model.onnx"]
for g, recs in d["profiles"].items():
    for ri, r in enumerate(recs):
        for bi, b in enumerate(bases):
            if g == "training_model.onnx" and bi >= ri: continue
            bt, gt, feats = b["nt"]["times"], r["nt"]["times"], b["nt"]["features"]
            acc = collections.defaultdict(lambda: [0.0, 0.0])
            for n, t in bt.items():
                if n in gt and n in feats and feats[n][0] == (r["nt"]["features"].get(n) or [None])[0]:
                    acc[feats[n][0]][0] += t; acc[feats[n][0]][1] += gt[n]
            tb = sum(a for a, _ in acc.values()); tg = sum(b for _, b in acc.values())
            top = sorted(acc.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:5]
            print(f"{g:20s}#{ri} vs base#{bi}: kept base {tb*1e3:.0f} ms graph {tg*1e3:.0f} ms ({tg/tb-1:+.1%}); " + ", ".join(f"{k} {(b-a)*1e3:+.1f}" for k, (a, b) in top))
