"""Table of tools/bench_codecs.py JSONs (ranges over runs): python benchtab.py bench*.json"""
import json, sys, glob
rows = {}
for f in sys.argv[1:]:
    d = json.load(open(f))
    for r in d["rows"]:
        key = r["codec"] + (f" rate {r['rate']}" if "rate" in r else "")
        for b in ("numpy", "numba", "aot"):
            if b in r:
                for k in ("encode_per_cpu_second", "decode_per_cpu_second", "encode_best", "decode_best"):
                    rows.setdefault(key, {}).setdefault((b, k), []).append(r[b][k])
        rows[key]["same"] = rows[key].get("same", []) + [r.get("same_bytes")]
print("| codec | enc per CPU s MB: numpy / JIT / AOT | dec per CPU s MB: numpy / JIT / AOT | enc wall best: JIT / AOT | dec wall best: JIT / AOT | same bytes |")
print("|---|---|---|---|---|:-:|")
f = lambda v: "–" if not v else (f"{min(v):.0f}–{max(v):.0f}" if len(v) > 1 else f"{v[0]:.0f}")
for key, v in rows.items():
    print(f"| {key} | {f(v.get(('numpy','encode_per_cpu_second')))} / {f(v.get(('numba','encode_per_cpu_second')))} / **{f(v.get(('aot','encode_per_cpu_second')))}** | "
          f"{f(v.get(('numpy','decode_per_cpu_second')))} / {f(v.get(('numba','decode_per_cpu_second')))} / **{f(v.get(('aot','decode_per_cpu_second')))}** | "
          f"{f(v.get(('numba','encode_best')))} / {f(v.get(('aot','encode_best')))} | {f(v.get(('numba','decode_best')))} / {f(v.get(('aot','decode_best')))} | {all(v['same'])} |")
