"""Join rp.py outputs (tags) into a markdown table: file, model, settings, graph, measured, per tag predicted/error."""
import sys, re, collections, statistics
tags, files = sys.argv[1].split(","), sys.argv[2:]
rows = collections.OrderedDict()
for tag, f in zip(tags, files):
    for line in open(f):
        if not line.startswith("  "):
            continue
        p = line.split()
        key = (p[1].replace(".json", "").replace(".raw", ""), p[2], p[3], p[4].replace(".onnx", ""))
        rows.setdefault(key, {"meas": float(p[8])})[tag] = (float(p[6]), float(p[9].rstrip("%")))
print("| set | model | settings | graph | measured s | " + " | ".join(f"{t}: pred s / error" for t in tags) + " |")
print("|---|---|---|---|---:|" + "---:|" * len(tags))
for k, v in rows.items():
    cells = [f"{v[t][0]:.3f} / {v[t][1]:+.1f} %" if t in v else "—" for t in tags]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {v['meas']:.3f} | " + " | ".join(cells) + " |")
print()
groups = collections.defaultdict(lambda: collections.defaultdict(list))
for k, v in rows.items():
    for t in tags:
        if t in v:
            groups[(k[1], k[2])][t].append(abs(v[t][1]))
            groups[("all", "")][t].append(abs(v[t][1]))
print("| model | settings | " + " | ".join(f"{t}: within 10 % / mean / max" for t in tags) + " |")
print("|---|---|" + "---|" * len(tags))
for g, d in sorted(groups.items()):
    print(f"| {g[0]} | {g[1]} | " + " | ".join(f"{sum(e <= 10 for e in d[t])}/{len(d[t])} / {statistics.mean(d[t]):.1f} % / {max(d[t]):.1f} %" for t in tags) + " |")
