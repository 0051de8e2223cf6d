import sys, collections
T = 131072
cur = None; live = {}
stats = {}
for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == "STEP":
        cur = int(p[1]); st = stats[cur] = collections.Counter(); pages = set(); pages_t = set(); lv = 0; mx = 0; continue
    if p[0] == "END":
        st["pages_MiB"] = len(pages) * 4096 / 2**20; st["pages_tensor_MiB"] = len(pages_t) * 4096 / 2**20; st["maxlive_small_MiB"] = mx / 2**20; cur = None; continue
    if p[0] == "F":
        if p[1] in live:
            k, n = live.pop(p[1])
            if cur is not None and n < T: lv -= n
        continue
    kind, n, a = p[0], int(p[1]), int(p[2], 16)
    live[p[2]] = (kind, n)
    if cur is None or n >= T: continue
    st[f"{kind}_n"] += 1; st[f"{kind}_bytes"] += n
    lv += n; mx = max(mx, lv)
    for pg in range(a >> 12, (a + n - 1 >> 12) + 1):
        pages.add(pg)
        if kind == "A": pages_t.add(pg)
for i, st in stats.items():
    print(i, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in sorted(st.items())})
