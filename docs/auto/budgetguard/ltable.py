import json, statistics, os
M = 2**20; D = "/tmp/budgetguard/S/L"
stop37 = {"squeezenet_s": (7.21, 6.46, 2.31), "mobilenet_v1_s": (11.30, 11.00, 1.82), "plain_deep": (11.89, 11.97, 2.17),
          "wide_resnet_s": (20.76, 21.56, 3.04), "densenet_s": (46.11, 49.08, 2.78), "leaky_vgg": (19.30, 22.40, 6.85)}
print("| net | budget | how | predicted | verify attempts (internal → measured) | measured (final `measure`) | baseline (same run) | ratio | ≤ budget | stop 37: measured / budget / ratio |")
print("|---|---:|---|---:|---|---:|---:|---:|---|---|")
rat = []; done = 0
for n in stop37:
    s = stop37[n]; s37 = f"{s[0]:.2f} / {s[1]:.2f} / {s[2]:.2f}×" + (" **over**" if s[0] > s[1] else "")
    try:
        t = json.load(open(f"{D}/{n}.lossy.transform.json"))
    except Exception:
        print(f"| {n} | — | not run before the deadline | | | | | | | {s37} |"); continue
    v = t["verify"]; m = json.load(open(f"{D}/{n}_lossy.ortdef.json")); b = json.load(open(f"{D}/{n}.base.ortdef.json"))
    how = "lowest measured + 1 % (retry.sh)" if os.path.exists(f"{D}/{n}.lossy.transform.first.err") else "tightest predicted (inspect)"
    att = "; ".join(f"{a['internal_budget_bytes']/M:.2f} → {a['measured_bytes']/M:.2f}" if a['measured_bytes'] else f"{a['internal_budget_bytes']/M:.2f} → no plan" for a in v["attempts"])
    r = b["growth_bytes"] / m["growth_bytes"]; rat.append(r)
    print(f"| {n} | {v['budget_bytes']/M:.2f} | {how} | {t['auto']['ort_defaults']['predicted_growth_bytes']/M:.2f} | {att} | {m['growth_bytes']/M:.2f} | {b['growth_bytes']/M:.2f} | {r:.2f}× | {'yes' if m['growth_bytes'] <= v['budget_bytes'] else '**NO**'} | {s37} |")
if rat:
    print(f"\nmedian ratio {statistics.median(rat):.2f}× over {len(rat)} nets measured (stop 37: 2.54× over 6, three of them over budget)")
