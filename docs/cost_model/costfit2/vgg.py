import pickle, collections, statistics
S = pickle.load(open("/tmp/costfit2/stored.pkl", "rb")) + pickle.load(open("/tmp/costfit2/fresh.pkl", "rb"))
base = collections.defaultdict(list)
for s in S:
    m, st, g = s.label.split()
    if g == "training_model": base[(s.group, m, st)].append(s.base / s.measured)
rows = collections.defaultdict(list)
for s in S:
    m, st, g = s.label.split()
    if g == "training_model" or (m, st) not in (("vgg16", "measure"), ("mobilenet_v2", "ort-default")): continue
    b = statistics.mean(base[(s.group, m, st)]) if base[(s.group, m, st)] else float("nan")
    e = s.base / s.measured - 1; r = (s.base / s.measured) / b - 1
    rows[(m, st, g)].append((s.group, e, b - 1, r, sum(s.codec.values()) / s.measured))
for k in sorted(rows):
    print(k)
    for grp, e, be, r, sh in rows[k]:
        print(f"   {grp:8s} error {e:+6.1%}   its chunk's baseline {be:+6.1%}   error vs baseline (ratio) {r:+6.1%}   codec share {sh:.2f}")
    es = [x[1] for x in rows[k]]; rs = [x[3] for x in rows[k]]
    print(f"   mean error {statistics.mean(es):+.1%} (sd {statistics.pstdev(es):.1%}); mean ratio error {statistics.mean(rs):+.1%} (sd {statistics.pstdev(rs):.1%})")
