import json, glob, onnx
M = 2**20
rows = [("P12", "P12/training_model.onnx", "P12.transform.json", ["P12.diag--trim.jsonl"]),
        ("N12", "N12/training_model.onnx", "N12.transform.json", glob.glob("N12.new.onxc.*.json")),
        ("P15", "P15/training_model.onnx", "P15.transform.json", glob.glob("P15.new.onxc.*.json")),
        ("P20", "P20/training_model.onnx", "P20.transform.json", glob.glob("P20.new.onxc.*.json")),
        ("mob", "mob/training_model.onnx", "/tmp/finalgate/before/mobilenet_v1_s.transform.json", ["mob.new.json"])]
for name, g, t, ms in rows:
    m = onnx.load(g, load_external_data=False)
    n = len(m.graph.node); py = sum(1 for x in m.graph.node if x.domain == "ai.onnx.contrib")
    pred = json.load(open(t))["auto"]["predicted_peak_bytes"]
    peaks = []
    for f in ms:
        if f.endswith(".jsonl"):
            peaks += [json.loads(l)["peak"] for l in open(f) if '"step"' in l and json.loads(l)["step"] > 0]
        else:
            peaks += json.load(open(f))["extras"]["peak_bytes_per_step"]
    lo, hi = min(peaks), max(peaks)
    print(f"| {name} | {n:,} | {py:,} | {pred/M:.2f} | {lo/M:.2f}–{hi/M:.2f} ({len(peaks)} steps) | {(hi-pred)/M:.2f} | {(hi-pred)/n:.0f} |")
