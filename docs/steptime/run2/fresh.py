"""Bytes of fresh (>= 128 KiB) node outputs per step by category, from the project's analysis (ORT with mem
reuse off allocates every non-view output)."""
import sys, collections, onnx
from onnxcomp.analysis import analyze_model
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
base = None
for f in sys.argv[1:]:
    m = onnx.load(f, load_external_data=False)
    a = analyze_model(m)
    acc = collections.Counter()
    for name, t in a.tensors.items():
        if t.producer is None or not t.nbytes or t.nbytes < 128 * 1024:
            continue
        n = m.graph.node[t.producer]
        if n.op_type in VIEWS:
            continue
        nm = n.name
        cat = ("chunk " if nm.startswith("onnxcomp_chunked") else "dpr " if "fp16" in nm or "dpr" in nm else "") + n.op_type
        acc[cat] += t.nbytes
    tot = sum(acc.values())
    print(f"{f.split('/')[-1]}: {tot/2**20:.1f} MiB fresh outputs >= 128 KiB")
    for k, v in acc.most_common(14):
        print(f"   {k:36s} {v/2**20:7.1f} MiB")
