"""Small summaries of transform JSONs (the auto record's ort_defaults without its candidate list, verify, scratch)."""
import json, sys
out = {}
for t in sys.argv[1:]:
    try:
        d = json.load(open(f"{t}.transform.json"))
    except Exception:
        continue
    o = dict(d["auto"]["ort_defaults"]); o.pop("candidates", None)
    out[t] = {"step_budget_bytes": d["auto"]["budget_bytes"], "ort_defaults": o, "verify": d.get("verify"),
              "scratch_records": len(d.get("scratch") or []), "blocked_records": len(d.get("blocked") or [])}
json.dump(out, sys.stdout, indent=1)
