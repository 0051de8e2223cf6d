"""Repredict copies of bench JSONs with TREE's model (and optional COST json); print per-graph errors + summary.
usage: rp.py TREE TAG COST|- FILES..."""
import json, sys, shutil, subprocess, statistics, os
tree, tag, cost, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
errs = {}
for f in files:
    tmp = f"/tmp/costquiet/rp/{os.path.basename(os.path.dirname(f))}_{os.path.basename(f)}.{tag}.json"
    shutil.copy(f, tmp)
    cmd = [sys.executable, f"{tree}/tools/bench_cost_model.py", "--repredict", "--json", tmp] + (["--cost", cost] if cost != "-" else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree})
    if r.returncode: print(r.stderr[-2000:])
    d = json.load(open(tmp))
    for k, e in d["runs"].items():
        for g, x in e["graphs"].items():
            if "measured_s" in x:
                err = x["predicted_s"] / x["measured_s"] - 1
                model = os.path.basename(e["dir"])
                errs.setdefault((model, e["settings"]), []).append(abs(err))
                print(f"  {tag} {os.path.basename(f):28s} {model:12s} {e['settings']:11s} {g:28s} pred {x['predicted_s']:.3f} meas {x['measured_s']:.3f} {err:+.1%}")
allv = [v for l in errs.values() for v in l]
for k, l in sorted(errs.items()):
    print(f"{tag} {k}: {len(l)} graphs, within 10% {sum(x <= .10 for x in l)}, mean {statistics.mean(l):.1%}, max {max(l):.1%}")
print(f"{tag} ALL: {len(allv)} graphs, within 10% {sum(x <= .10 for x in allv)}, mean {statistics.mean(allv):.1%}, max {max(allv):.1%}")
