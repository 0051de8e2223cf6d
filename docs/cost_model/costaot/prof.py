"""Profile (ORT profiler, fresh process) and optionally measure (onnxcomp measure, fresh process) graphs, in the
order given, under one settings; store NodeTimes dicts and measurements.
usage: prof.py ART measure|ort OUT.json [--measure] GRAPH...   (training_model.onnx must be named)"""
import json, sys, os, time, warnings, resource
warnings.simplefilter("ignore")
from pathlib import Path
from onnxcomp.planner.cost_model import profile_node_seconds
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings
art, st, out, graphs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
do_measure = "--measure" in graphs; graphs = [g for g in graphs if g != "--measure"]
settings = RuntimeSettings() if st == "measure" else RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
res = json.load(open(out)) if os.path.exists(out) else {"art": str(art), "settings": st, "profiles": {}, "measures": {}}
res.setdefault("measures", {})
def cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN); return ru.ru_utime + ru.ru_stime
for g in graphs:
    l0 = os.getloadavg()[0]; t0 = time.time(); c0 = cpu()
    p = profile_node_seconds(art, model=g, steps=3, settings=settings)
    res["profiles"].setdefault(g, []).append({"nt": p.to_dict(), "load": [l0, os.getloadavg()[0]], "at": t0,
                                              "wall": time.time() - t0, "cpu": cpu() - c0})
    print(f"P {g}: step {p.step_seconds:.3f} s nodes {sum(p.values()):.3f} load {l0:.2f} wall {time.time()-t0:.0f}s cpu {cpu()-c0:.0f}s", flush=True)
    json.dump(res, open(out, "w"))
    if do_measure:
        l0 = os.getloadavg()[0]; t0 = time.time(); c0 = cpu()
        m = measure(art, model=g, steps=3, settings=settings)
        res["measures"].setdefault(g, []).append({"step_s": m.step_time_s, "steps_s": m.step_times_s, "load": [l0, os.getloadavg()[0]],
                                                  "at": t0, "cpu": cpu() - c0, "peak": m.peak_bytes, "growth": m.growth_bytes})
        print(f"M {g}: step {m.step_time_s:.3f} {[round(s,3) for s in m.step_times_s]} load {l0:.2f} cpu {cpu()-c0:.0f}s", flush=True)
        json.dump(res, open(out, "w"))
