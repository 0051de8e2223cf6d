import json, sys
M = 2**20
def f(x): return f"{x/M:.2f}"
for t in sys.argv[1:]:
    try:
        tr = json.load(open(f"{t}.transform.json"))
        o = tr["auto"]["ort_defaults"]; p = o["parts"]
        line = (f"{t}: step {f(tr['auto']['budget_bytes'])} L {p.get('scratch_limit_bytes')} nodes {p['nodes']} pred growth {f(o['predicted_growth_bytes'])} "
                f"P {f(p['pattern_bytes'])}x{p['pattern_copies']} regions {[r//M for r in p['arena_regions']]} largest_out {f(p['largest_outside_bytes'])} pred set-up added {f(o['predicted_set_up_added_bytes'])}")
    except Exception as e:
        line = f"{t}: (no transform json: {e})"
    try:
        me = json.load(open(f"{t}.ortdef.json"))
        line += f" | measured growth {f(me['growth_bytes'])} set-up {f(me['rss_setup_bytes'])} losses {[round(l,4) for l in me.get('losses', [])]}"
    except Exception as e:
        line += f" | (no measure: {e})"
    print(line)
