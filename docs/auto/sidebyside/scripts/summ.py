import json, glob, sys
MiB = 1 << 20
rows = {}
for f in sorted(glob.glob("M/*.json")):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "bad", e); continue
    r = d.get("result", d)
    tag = f[2:-5]
    print(f"{tag:28s} peak {r.get('peak_bytes',0)/MiB:7.2f} growth {r.get('growth_bytes',0)/MiB:7.2f} "
          f"pp {r.get('process_peak_bytes',0)/MiB:7.1f} setup {r.get('rss_setup_bytes',0)/MiB:7.1f} "
          f"t {r.get('step_time_s',0):.3f} losses {r.get('losses')}")
