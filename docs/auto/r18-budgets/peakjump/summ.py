import json, sys, glob
M = 2**20
for f in sys.argv[1:]:
    try: d = json.load(open(f))
    except Exception as e: print(f, "ERR", e); continue
    e = d["extras"]
    print(f, "peak", round(d["peak_bytes"]/M, 2), "per-step", [round(p/M, 2) for p in e.get("peak_bytes_per_step", [])],
          "warm", [round(p/M, 2) for p in e.get("warmup_peak_bytes", [])], "growth", round(d["growth_bytes"]/M, 2),
          "trimmed", [round(p/M, 2) for p in e.get("heap_trimmed_bytes_per_step", [])], "loss0", d["losses"][0])
