import json, sys, glob, os
MiB = 1 << 20
for d in sys.argv[1:]:
    for f in sorted(glob.glob(f"{d}/*.ortdef.json")):
        if ".base." in f: continue
        tag = os.path.basename(f)[:-len(".ortdef.json")]
        net = tag.split("_lossy")[0].split("_exact")[0]
        try:
            b = json.load(open(f"{d}/{net}.base.ortdef.json")); p = json.load(open(f))
        except ValueError:
            print(f"{tag:45s} no measurement (nothing written)"); continue
        added = p["rss_setup_bytes"] - b["rss_setup_bytes"]
        tr = json.load(open(f"{d}/{tag}.transform.json")) if os.path.getsize(f"{d}/{tag}.transform.json") else {}
        v = tr.get("verify", {})
        print(f"{tag:45s} base {b['growth_bytes']/MiB:7.2f} plan {p['growth_bytes']/MiB:7.2f} ratio {b['growth_bytes']/p['growth_bytes']:.2f}x "
              f"set-up added {added/MiB:+6.2f} counted {b['growth_bytes']/(p['growth_bytes']+added):.2f}x "
              f"losses_equal {b['losses']==p['losses']} budget {v.get('budget_bytes',0)/MiB:.2f} verify {v.get('measured_bytes',0)/MiB:.2f}")
