import json, sys, statistics
mode, D = sys.argv[1], sys.argv[2]
M = 2**20; rat = []
print("| net | tightest budget | predicted | verify attempts (internal budget → measured) | measured growth (final measure) | baseline (same run) | ratio | ≤ budget | losses = baseline |")
print("|---|---:|---:|---|---:|---:|---:|---|---|")
for n in ["squeezenet_s", "mobilenet_v1_s", "plain_deep", "wide_resnet_s", "densenet_s", "leaky_vgg"]:
    try:
        t = json.load(open(f"{D}/{n}.{mode}.transform.json"))
    except Exception as e:
        print(f"| {n} | (no transform: {open(f'{D}/{n}.{mode}.transform.err').read().strip().splitlines()[-1][:200] if True else e}) |"); continue
    v = t["verify"]; m = json.load(open(f"{D}/{n}_{mode}.ortdef.json")); b = json.load(open(f"{D}/{n}.base.ortdef.json"))
    g = t["auto"]["ort_defaults"]
    att = "; ".join(f"{a['internal_budget_bytes']/M:.2f} → {a['measured_bytes']/M:.2f}" if a['measured_bytes'] else f"{a['internal_budget_bytes']/M:.2f} → no plan" for a in v["attempts"])
    r = b["growth_bytes"] / m["growth_bytes"]; rat.append(r)
    print(f"| {n} | {v['budget_bytes']/M:.2f} | {g['predicted_growth_bytes']/M:.2f} | {att} | {m['growth_bytes']/M:.2f} | {b['growth_bytes']/M:.2f} | {r:.2f}× | {'yes' if m['growth_bytes'] <= v['budget_bytes'] else '**NO**'} | {m['losses'] == b['losses']} |")
print(f"\nmedian ratio {statistics.median(rat):.2f}× over {len(rat)} nets")
