"""Repredict copies of bench JSONs with a given cost model; print per-file summary lines."""
import json, sys, shutil, subprocess, statistics, os
files = sys.argv[2:]; cost = sys.argv[1]
allerr = []
for f in files:
    tmp = f"/tmp/costall/rp/{os.path.basename(f)}.{os.path.basename(cost)}.{os.environ.get('TAG','wt')}.json"
    shutil.copy(f, tmp)
    args = [sys.executable, os.environ.get("TOOL","/work/wt/costall/tools/bench_cost_model.py"), "--repredict", "--json", tmp]
    if cost != "default":
        args += ["--cost", cost]
    subprocess.run(args, capture_output=True, env={**os.environ, "PYTHONPATH": os.environ.get("TREE","/work/wt/costall")})
    d = json.load(open(tmp))
    for k, e in d["runs"].items():
        for g, r in e["graphs"].items():
            if "measured_s" in r:
                allerr.append((os.path.basename(f), e["settings"], g, r["predicted_s"] / r["measured_s"] - 1))
errs = [abs(e[3]) for e in allerr]
print(f"{cost}: {len(errs)} graphs, mean |err| {statistics.mean(errs):.1%}, max {max(errs):.1%}, within 10%: {sum(x <= .10 for x in errs)}")
for s in ("measure", "ort-default"):
    e = [abs(x[3]) for x in allerr if x[1] == s]
    if e: print(f"   {s}: {len(e)} graphs, mean {statistics.mean(e):.1%}, max {max(e):.1%}, within 10%: {sum(x <= .10 for x in e)}")
if "-v" in os.environ.get("V", ""):
    for x in allerr: print("  ", x[0], x[1], x[2], f"{x[3]:+.1%}")
