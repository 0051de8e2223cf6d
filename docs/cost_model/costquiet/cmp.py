import sys, re, collections
tags = sys.argv[2:]; s = sys.argv[1]
rows = collections.OrderedDict()
for t in tags:
    for line in open(f"/tmp/costquiet/rp{s}_{t}.txt"):
        m = re.match(r"\s+(\S+) (\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+pred (\S+) meas (\S+) (\S+)%", line)
        if m:
            _, f, model, st, g, p, meas, e = m.groups()
            rows.setdefault((f, model, st, g), {})[t] = (float(p), float(meas), float(e))
for k, v in rows.items():
    meas = next(iter(v.values()))[1]
    print(f"{k[0][:26]:26s} {k[1]:12s} {k[2]:11s} {k[3]:24s} meas {meas:.3f} " + " ".join(f"{t} {v[t][2]:+6.1f}%" if t in v else f"{t} -" for t in tags))
