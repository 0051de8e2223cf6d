import sys, json, collections
from pathlib import Path
tag = sys.argv[1]; skip = {int(x) for x in sys.argv[2].split(",")} if len(sys.argv) > 2 else set()
lines = Path(f"{tag}.nopattern.log").read_text().splitlines()
s, e = lines.index("STEP 1"), lines.index("OPT 1")
addr, gt, k = {}, [], 0
for l in lines[s+1:e]:
    p = l.split()
    if p[0] == "A":
        sz = int(p[1]); addr[p[2]] = len(gt); gt.append([sz, None])
    elif p[0] == "F" and p[1] in addr:
        gt[addr.pop(p[1])][1] = len(gt)
d = json.load(open(f"{tag}.events.json")); rp, names = d["rp"], d["names"]
sizes = {sz for sz, _ in rp} & {sz for sz, _ in gt}
keep = {sz for sz in sizes if sz >= 4096 and sz not in skip and collections.Counter(x for x, _ in gt)[sz] == collections.Counter(x for x, _ in rp)[sz]}
def seq(ev):
    idx = [i for i, (sz, _) in enumerate(ev) if sz in keep]
    pos = {i: n for n, i in enumerate(idx)}
    rank, out = collections.Counter(), {}
    for i in idx:
        sz, end = ev[i]
        r = rank[sz]; rank[sz] += 1
        endpos = None if end is None else sum(1 for j in idx if j < end)
        out[(sz, r)] = (pos[i], endpos, i)
    return out
G, R = seq(gt), seq(rp)
bad = 0
for key in sorted(R, key=lambda k: R[k][0]):
    g, r = G.get(key), R[key]
    if g is None: continue
    if g[0] != r[0] or g[1] != r[1]:
        bad += 1
        if bad <= 30: print(key, "ORT alloc/free", g[:2], "replay", r[:2], names[r[2]][:3])
print("kept sizes", len(keep), "buffers", len(R), "mismatches", bad)
