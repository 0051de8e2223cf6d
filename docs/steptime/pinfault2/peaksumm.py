import json, glob, collections, sys
rows = collections.defaultdict(list)
for f in sorted(glob.glob('/tmp/pinfault/peaks/*.json')):
    n = f.split('/')[-1][:-5]
    try:
        d = json.load(open(f))
    except Exception:
        continue
    r = d if 'peak_bytes' in d else d.get('result', d)
    ex = r.get('extras', r)
    g, thp, kind, rep = n.rsplit('-', 3)
    rows[(g, kind, thp)].append((r['peak_bytes'] / 2**20, r['growth_bytes'] / 2**20, r['rss_setup_bytes'] / 2**20,
                                 [round(p / 2**20, 2) for p in ex.get('peak_bytes_per_step', [])], r['losses']))
for (g, kind, thp), v in sorted(rows.items()):
    print(f"{g:16s} {kind:4s} {thp}: peak " + " / ".join(f"{x[0]:.2f}" for x in v) + "  growth " +
          " / ".join(f"{x[1]:.2f}" for x in v) + "  setup " + " / ".join(f"{x[2]:.1f}" for x in v) +
          "  per-step " + " ".join(str(x[3]) for x in v) + f"  losses same: {len({tuple(x[4]) for x in v})==1} {v[0][4][0]:.9f}")
