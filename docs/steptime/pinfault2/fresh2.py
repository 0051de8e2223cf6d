"""Fresh (>= 128 KiB, non-view) node outputs per step by source, plus PyOp bridge input copies."""
import sys, collections, onnx
from onnxcomp.analysis import analyze_model
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
TH = 128 * 1024
base = onnx.load(sys.argv[1], load_external_data=False)
bnames = {n.name for n in base.graph.node}
for f in sys.argv[1:]:
    m = onnx.load(f, load_external_data=False)
    a = analyze_model(m)
    acc = collections.Counter(); cnt = collections.Counter()
    for name, t in a.tensors.items():
        if t.producer is None or not t.nbytes or t.nbytes < TH:
            continue
        n = m.graph.node[t.producer]
        if n.op_type in VIEWS:
            continue
        if n.name in bnames:
            cat = "orig " + n.op_type
        elif n.domain == "ai.onnx.contrib":
            cat = "pyop-out " + n.op_type
        elif "chunked" in n.name:
            cat = "chunk " + n.op_type
        else:
            cat = "ins " + n.op_type
        acc[cat] += t.nbytes; cnt[cat] += 1
    # bridge input copies: every PyOp input, copied into a fresh numpy array per call
    for n in m.graph.node:
        if n.domain != "ai.onnx.contrib":
            continue
        for i in n.input:
            t = a.tensors.get(i)
            if t is not None and t.nbytes and t.nbytes >= TH:
                acc["bridge-in " + n.op_type] += t.nbytes; cnt["bridge-in " + n.op_type] += 1
    tot = sum(acc.values())
    print(f"{f.split('/')[-1]}: {tot/2**20:.1f} MiB fresh >= 128 KiB = {tot/4096/1000:.1f} K pages")
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"   {k:44s} {cnt[k]:4d} x  {v/2**20:7.1f} MiB  {v/4096/1000:6.1f} K pages")
