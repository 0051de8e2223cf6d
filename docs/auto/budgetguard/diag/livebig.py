import sys, collections
live = {}; phase = "pre"; order = []
for line in open(sys.argv[1]):
    p = line.split()
    if not p: continue
    if p[0] == "MARK":
        phase = p[1]
        if phase == "end3": break
        continue
    if p[0] in "MCRA" and len(p) >= 3:
        live[p[2]] = (int(p[1]), phase, p[0])
    elif p[0] == "F" and len(p) >= 2:
        live.pop(p[1], None)
after = [(a, s, ph, k) for a, (s, ph, k) in live.items() if ph != "pre"]
print("live big allocations made after set-up:", len(after), "total MiB", round(sum(s for _, s, _, _ in after)/2**20, 3))
for a, s, ph, k in sorted(after, key=lambda t: -t[1])[:40]:
    print(f"  {k} {s:>10} B ({s/2**20:.3f} MiB) in {ph} at {a}")
