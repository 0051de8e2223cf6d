import json, sys
M = 2**20
mode = sys.argv[1]
rows = []
for n in ["squeezenet_s", "mobilenet_v1_s", "plain_deep", "wide_resnet_s", "densenet_s", "leaky_vgg"]:
    try:
        b = json.load(open(f"base.{n}.ortdef.json")); bo = json.load(open(f"base.{n}.onxc.json"))
        g = json.load(open(f"G/{n}_{mode}.ortdef.json")); go = json.load(open(f"G/{n}_{mode}.onxc.json"))
        t = json.load(open(f"G/{n}.{mode}.transform.json"))
    except Exception as e:
        print(n, "missing", e); continue
    od = t["auto"].get("ort_defaults", {})
    sp = od.get("spacers") or []
    dset = (g["rss_setup_bytes"] - b["rss_setup_bytes"]) / M
    r = b["growth_bytes"] / g["growth_bytes"]
    same = g["losses"] == b["losses"]
    rows.append(r)
    print(f"{n:15s} budget {od.get('budget_bytes', 0)/M if od else 0:6.2f} pred {od.get('predicted_growth_bytes', 0)/M:6.2f} "
          f"growth {b['growth_bytes']/M:6.2f} -> {g['growth_bytes']/M:6.2f} = {r:4.2f}x  step {bo['peak_bytes']/M:6.2f} -> {go['peak_bytes']/M:6.2f} "
          f"({bo['peak_bytes']/go['peak_bytes']:4.2f}x)  setup {dset:+6.1f}  procpeak {b['extras']['process_peak_bytes']/M:6.1f} -> {g['extras']['process_peak_bytes']/M:6.1f} spacers {sum(sp)} losses_eq {same}")
rows.sort(); k = len(rows)
if k: print("median", (rows[(k-1)//2] + rows[k//2]) / 2, rows)
