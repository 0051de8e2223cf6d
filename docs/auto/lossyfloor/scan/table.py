import json, os, statistics
M = 2**20
before = {"squeezenet_s": 2.34, "mobilenet_v1_s": 1.84, "plain_deep": 2.18, "wide_resnet_s": 3.04, "densenet_s": 2.78, "leaky_vgg": 6.88}
before_mib = {"squeezenet_s": 7.10, "mobilenet_v1_s": 11.18, "plain_deep": 11.81, "wide_resnet_s": 20.79, "densenet_s": 46.09, "leaky_vgg": 19.23}
rows, ratios = [], {}
os.chdir("/tmp/lossyfloor/S")
for n in before:
    try:
        base = json.load(open(f"{n}.base.ortdef.json"))["growth_bytes"]
        plan = json.load(open(f"{n}_lossy.ortdef.json"))
        g = plan["growth_bytes"]
    except Exception as e:
        rows.append(f"| {n} | — | not re-scanned ({type(e).__name__}) |"); continue
    pj = json.load(open(f"{n}_lossy/training_model.plan.json"))
    od = pj["auto"]["ort_defaults"]
    parts = od["parts"] or {}
    tb = json.load(open(f"{n}.lossy.scan.json"))["auto"]["ort_defaults"]["tightest_growth_budget_bytes"]
    try:
        tj = json.load(open(f"{n}.lossy.transform.json")); ver = tj.get("verify") or {}
        att = "; ".join(f"{a.get('internal_budget_bytes',0)/M:.2f}→{(a.get('measured_bytes') or 0)/M:.2f}" for a in ver.get("attempts", []))
    except Exception:
        att = "exit 2 (see .err)"
    r = base / g; ratios[n] = r
    rows.append(f"| {n} | {tb/M:.2f} | {od['predicted_growth_bytes']/M:.2f} | {att} | {g/M:.2f} | {base/M:.2f} | **{r:.2f}×** | {'yes' if g <= tb else 'NO'} | {before_mib[n]:.2f} ({before[n]:.2f}×) | {od.get('scratch_limit_bytes')} | {parts.get('pattern_bytes',0)/M:.2f}×{parts.get('pattern_copies')} | {parts.get('heap_bytes',0)/M:.2f} | {parts.get('nodes')} | {[round(x,4) for x in plan['losses']]} |")
print("| net | tightest budget (MiB) | predicted | verify (internal → measured) | measured growth | baseline (same run) | ratio | ≤ budget | stop 38 | scratch limit | P | PyOp heap | nodes | losses |")
print("|---|---:|---:|---|---:|---:|---:|---|---|---|---|---:|---:|---|")
print("\n".join(rows))
allr = dict(before); allr.update(ratios)
print("median (re-scanned where present, stop 38 elsewhere):", round(statistics.median(allr.values()), 2), sorted((round(v,2), k) for k, v in allr.items()))
print("median stop 38:", round(statistics.median(before.values()), 2))
