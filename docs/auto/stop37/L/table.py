import json, os, statistics
rows=[]
for n in ["squeezenet_s","mobilenet_v1_s","plain_deep","wide_resnet_s","densenet_s","leaky_vgg"]:
    b=json.load(open(f"{n}.base.ortdef.json"))
    cached=json.load(open(f"/tmp/lead/W/{n}.baseline.ort-default.json"))["growth_bytes"]
    f=f"{n}_lossy.ortdef.json"
    if not os.path.exists(f) or os.path.getsize(f)==0:
        print(n, "pending", round(b["growth_bytes"]/2**20,2)); continue
    d=json.load(open(f)); s=json.load(open(f"{n}.lossy.scan.json"))["auto"]["ort_defaults"]
    tb=s["tightest_growth_budget_bytes"]
    r=b["growth_bytes"]/d["growth_bytes"]; rows.append(r)
    print(f"{n}: base {b['growth_bytes']/2**20:.2f} (cached {cached/2**20:.2f}) plan {d['growth_bytes']/2**20:.2f} budget {tb/2**20:.2f} -> {r:.2f}x, process peak {(b['rss_setup_bytes']+b['growth_bytes'])/2**20:.1f} -> {(d['rss_setup_bytes']+d['growth_bytes'])/2**20:.1f}, over budget: {d['growth_bytes']>tb}")
if rows: print("median", statistics.median(rows), len(rows))
