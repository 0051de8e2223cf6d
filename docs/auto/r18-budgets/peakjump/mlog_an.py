import sys, collections
T = 131072
cur = None; live = {}; stats = {}
for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == "STEP":
        cur = int(p[1]); st = stats[cur] = collections.Counter(); lv = {"small": 0, "big": 0}; mx = {"small": 0, "big": 0, "both": 0}; st_live = (lv, mx); continue
    if p[0] == "END":
        stats[cur]["max_small"] = mx["small"]; stats[cur]["max_big"] = mx["big"]; stats[cur]["max_both"] = mx["both"]; cur = None; continue
    if p[0] == "F":
        if p[1] in live:
            k, n = live.pop(p[1])
            if cur is not None:
                lv["small" if n < T else "big"] -= n
        continue
    kind, n, a = p[0], int(p[1]), p[2]
    live[a] = (kind, n)
    if cur is None: continue
    c = "small" if n < T else "big"
    st[f"{kind}_{c}_n"] += 1; st[f"{kind}_{c}_bytes"] += n
    lv[c] += n; mx[c] = max(mx[c], lv[c]); mx["both"] = max(mx["both"], lv["small"] + lv["big"])
M = 2**20
for i, st in stats.items():
    print(i, {k: (round(v / M, 2) if "bytes" in k or "max" in k else v) for k, v in sorted(st.items())})
