"""Old vs new cost model on the same stored profiles and measurements (bench_cost_model JSON)."""
import importlib.util, json, sys, warnings
sys.path.insert(0, "/work/wt-steptime")
from pathlib import Path
import onnx
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); return m
old = load("/tmp/steptime/old_cost_model.py", "old_cm")
import onnxcomp.planner.cost_model as new
warnings.simplefilter("ignore")
rows = []
for path in sys.argv[1:]:
    data = json.loads(Path(path).read_text())
    for key, e in data["runs"].items():
        if "profile" not in e or not Path(e["dir"]).is_dir(): continue
        art = Path(e["dir"]); base = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
        for mod, tag in ((old, "old"), (new, "new")):
            prof = mod.NodeTimes.from_dict(e["profile"]); prof.features, prof.weights = mod.node_features(base), mod.node_weights(base)
            cost = mod.CostModel.load(new.SHIPPED_DEFAULTS)
            for g, rec in e["graphs"].items():
                if "measured_s" not in rec: continue
                p = mod.predict_step(onnx.load(str(art / g), load_external_data=False), cost, prof)
                rec[tag] = p.total
        for g, rec in e["graphs"].items():
            if "measured_s" in rec:
                rows.append((key.split("|")[0], e["settings"], g, rec["old"], rec["new"], rec["measured_s"], rec.get("load")))
print("| dir | settings | graph | measured s | old predicted (error) | new predicted (error) | load |")
print("|---|---|---|---:|---:|---:|---|")
for d, s, g, o, n, m, l in rows:
    print(f"| {d} | {s} | {g} | {m:.3f} | {o:.3f} ({o/m-1:+.1%}) | {n:.3f} ({n/m-1:+.1%}) | {l} |")
eo = [abs(o/m-1) for *_, o, n, m, l in rows]; en = [abs(n/m-1) for *_, o, n, m, l in rows]
print(f"old: mean |error| {sum(eo)/len(eo):.1%}, max {max(eo):.1%}, within 10 %: {sum(e <= .1 for e in eo)}/{len(eo)}")
print(f"new: mean |error| {sum(en)/len(en):.1%}, max {max(en):.1%}, within 10 %: {sum(e <= .1 for e in en)}/{len(en)}")
