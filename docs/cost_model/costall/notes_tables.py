"""Markdown tables for NOTES-costall.md from the bench JSONs (round 1 = b_*, round 2 = r2_*), repredicted
with the given cost model ('default' = the package's)."""
import json, os, shutil, subprocess, statistics, sys
from collections import defaultdict
cost = sys.argv[1]
MODELS = [("resnet18", "ResNet-18", "r18"), ("mobilenet_v2", "MobileNetV2", "mnv2"), ("vgg16", "VGG-16", "vgg")]
def files(short, st, rnd):
    if rnd == 1:
        cands = {"measure": f"b_{short}_measure.json", "ort-default": f"b_{short}_ort.json" if short == "r18" else f"b_{short}_ort-default.json"}
    else:
        cands = {st: f"r2_{short}_{st}.json"}
    f = cands[st]
    return f if os.path.exists(f) else None
def load(f):
    tmp = f"rp/{f}.{os.path.basename(cost)}.tbl.json"
    shutil.copy(f, tmp)
    args = [sys.executable, "/work/wt/costall/tools/bench_cost_model.py", "--repredict", "--json", tmp]
    if cost != "default": args += ["--cost", cost]
    subprocess.run(args, capture_output=True, env={**os.environ, "PYTHONPATH": "/work/wt/costall"})
    return json.load(open(tmp))
allerr = defaultdict(list)
for model, title, short in MODELS:
    for st in ("measure", "ort-default"):
        rows = defaultdict(dict); base = []
        for rnd in (1, 2):
            f = files(short, st, rnd)
            if not f: continue
            d = load(f)
            for key, e in d["runs"].items():
                pstep = e["profile"]["step_seconds"]
                for g, r in e["graphs"].items():
                    if "measured_s" not in r: continue
                    name = g.removesuffix(".onnx")
                    err = r["predicted_s"] / r["measured_s"] - 1
                    load1 = r.get("load", [None])[0]
                    if name == "training_model":
                        base.append((rnd, r["measured_s"], pstep, err, load1))
                        continue
                    rows[name][rnd] = (r["predicted_s"], r["measured_s"], err, load1, r.get("peak_bytes"), r.get("growth_bytes"))
                    allerr[(st, rnd)].append(abs(err))
        if not rows: continue
        print(f"\n**{title}, {st}** ({'step peak' if st == 'measure' else 'growth over set-up'} in MiB)\n")
        print("| graph | r1 predicted s | r1 measured s | r1 error | r1 load | r2 predicted s | r2 measured s | r2 error | r2 load | peak MiB (r1 / r2) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in sorted(rows):
            cells = []
            peaks = []
            for rnd in (1, 2):
                v = rows[name].get(rnd)
                if v:
                    cells += [f"{v[0]:.3f}", f"{v[1]:.3f}", f"{v[2]:+.1%}", f"{v[3]:.1f}"]
                    pk = v[4] if st == "measure" else v[5]
                    peaks.append(f"{pk / 2**20:.1f}" if pk is not None else "—")
                else:
                    cells += ["—"] * 4; peaks.append("—")
            print(f"| {name} | " + " | ".join(cells) + f" | {' / '.join(peaks)} |")
        ms = [b[1] for b in base]; ps = [b[2] for b in base]
        print(f"\nBaseline, every chunk (round: measured s / its own profile's step s / error / load): "
              + "; ".join(f"r{b[0]}: {b[1]:.3f} / {b[2]:.3f} / {b[3]:+.1%} / {b[4]:.1f}" for b in base)
              + f". Process-to-process spread of the measured baseline: {min(ms):.3f}–{max(ms):.3f} s "
              f"({(max(ms) / min(ms) - 1):.1%}).")
        for b in base: allerr[(st, b[0], "base")].append(abs(b[3]))
print()
for k, v in sorted(allerr.items(), key=str):
    print(f"- {k}: {len(v)} graphs, mean |error| {statistics.mean(v):.1%}, max {max(v):.1%}, within 10 %: {sum(x <= 0.10 for x in v)}/{len(v)}")
