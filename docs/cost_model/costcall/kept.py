"""Kept nodes (in baseline and graph) summed in each profile of q_mnv2_ort.json, by op type: does the transformed graph run the
baseline's own nodes faster?"""
import json, collections
from pathlib import Path
D = Path(__file__).parent
d = json.load(open(D / "q_mnv2_ort.json"))
b = d["profiles"]["training_model.onnx"][0]["nt"]; bt = b["times"]; bf = b["features"]
for g in d["profiles"]:
    if g == "training_model.onnx": continue
    t = d["profiles"][g][0]["nt"]["times"]
    kept = [n for n in bt if n in t]
    by = collections.defaultdict(lambda: [0.0, 0.0])
    for n in kept:
        k = bf.get(n, ["?"])[0]; by[k][0] += bt[n]; by[k][1] += t[n]
    new = sum(v for n, v in t.items() if n not in bt)
    print(f"{g}: kept {len(kept)}/{len(bt)} baseline {sum(bt[n] for n in kept):.3f} s -> in graph {sum(t[n] for n in kept):.3f} s; new nodes {new:.3f} s; "
          f"overhead {b['overhead_seconds']:.3f} -> {d['profiles'][g][0]['nt']['overhead_seconds']:.3f}")
    for k, (x, y) in sorted(by.items(), key=lambda kv: -kv[1][0])[:6]: print(f"    {k}: {x*1e3:.0f} -> {y*1e3:.0f} ms")
