import json, sys, collections
base = json.load(open(sys.argv[1])); g = json.load(open(sys.argv[2]))
bt, t, f = base["times"], g["times"], g["features"]
def cat(n, op, b):
    if op.startswith("Onnxcomp"): return op
    if "native_encode" in n: return "DPR fp16 Clip"
    if "encode_fp16_cast" in n: return "DPR fp16 encode Cast"
    if "decode_fp16_cast" in n: return "DPR fp16 decode Cast"
    if n in bt: return "kept nodes (same name as baseline)"
    if b < 65536: return "tiny new nodes (anchors, triggers, shape arithmetic, views)"
    if "chunk" in n or "stem" in n: return "chunked backward region: " + op
    if "recompute" in n: return "recompute clones: " + op
    return "other new big nodes: " + op
acc = collections.defaultdict(lambda: [0, 0.0])
for n, s in t.items():
    op, b, m = f.get(n, ("?", 0, 0)); c = cat(n, op, b); acc[c][0] += 1; acc[c][1] += s
print(f"baseline nodes {sum(bt.values())*1e3:.0f} ms, step {base['step_seconds']:.3f} s; graph nodes {sum(t.values())*1e3:.0f} ms, step {g['step_seconds']:.3f} s")
print("| category | nodes | ms per step |"); print("|---|---:|---:|")
for c, (k, s) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
    print(f"| {c} | {k} | {s*1e3:.0f} |")
