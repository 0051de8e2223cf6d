"""Repredict copies of bench JSONs with the model of TREE; print every graph's error and a summary."""
import json, sys, shutil, subprocess, statistics, os
tree, tag, files = sys.argv[1], sys.argv[2], sys.argv[3:]
errs = []
for f in files:
    tmp = f"/tmp/costfit/rp/{os.path.basename(f)}.{tag}.json"
    shutil.copy(f, tmp)
    r = subprocess.run([sys.executable, f"{tree}/tools/bench_cost_model.py", "--repredict", "--json", tmp],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree})
    if r.returncode: print(r.stderr[-2000:])
    d = json.load(open(tmp))
    for k, e in d["runs"].items():
        for g, x in e["graphs"].items():
            if "measured_s" in x:
                err = x["predicted_s"] / x["measured_s"] - 1
                errs.append(abs(err))
                print(f"  {tag} {os.path.basename(f)} {e['settings']:11s} {g:28s} pred {x['predicted_s']:.3f} meas {x['measured_s']:.3f} {err:+.1%}")
print(f"{tag}: {len(errs)} graphs, mean |err| {statistics.mean(errs):.1%}, max {max(errs):.1%}, within 10%: {sum(x <= .10 for x in errs)}")
