"""comet/dpr-fp16 minus baseline: fresh (>= 128 KiB, non-view) ORT outputs per step by source, in 4 KiB pages
(one minor fault each under MALLOC_MMAP_THRESHOLD_=131072 with ORT's mem reuse off). Usage: BASE GRAPH..."""
import sys, collections, onnx
from onnxcomp.analysis import analyze_model
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
TH = 128 * 1024
def kind(n, bnames):
    nm = n.name
    if n.domain == "ai.onnx.contrib":
        return "PyOp outputs (ORT-allocated, bridge memcpy into them): " + n.op_type.replace("Onnxcomp", "")
    if n.name in bnames:
        return "original nodes: " + n.op_type
    if "chunked" in nm:
        return "chunked stem backward region"
    if "fp16" in nm or "native_encode" in nm:
        return "DPR fp16 native (Clip, Casts)"
    if "bits" in nm or "positive" in nm:
        return "sign bits native (Greater, Cast, MatMulInteger, Gather)"
    if n.op_type == "Cast":
        return "mask Cast(bool->float) for Mul"
    return "other inserted: " + n.op_type
def tally(path, bnames):
    m = onnx.load(path, load_external_data=False)
    a = analyze_model(m)
    acc = collections.Counter()
    for name, t in a.tensors.items():
        if t.producer is None or not t.nbytes or t.nbytes < TH:
            continue
        n = m.graph.node[t.producer]
        if n.op_type in VIEWS:
            continue
        acc[kind(n, bnames)] += t.nbytes
    for n in m.graph.node:
        if n.domain == "ai.onnx.contrib":
            for i in n.input:
                t = a.tensors.get(i)
                if t is not None and t.nbytes and t.nbytes >= TH:
                    acc["PyOp bridge input copies (declared sizes): " + n.op_type.replace("Onnxcomp", "")] += t.nbytes
    return acc
base = onnx.load(sys.argv[1], load_external_data=False)
bnames = {n.name for n in base.graph.node}
b = tally(sys.argv[1], bnames)
for g in sys.argv[2:]:
    c = tally(g, bnames)
    print(f"\n{g}: total {sum(c.values())/4096/1000:.1f} K pages (baseline {sum(b.values())/4096/1000:.1f} K); difference by source:")
    keys = sorted(set(b) | set(c), key=lambda k: -(abs(c[k] - b[k])))
    for k in keys:
        d = c[k] - b[k]
        if d:
            print(f"  {k:78s} {d/4096/1000:+7.1f} K pages  ({d/2**20:+6.1f} MiB)")
    print(f"  {'net':78s} {(sum(c.values())-sum(b.values()))/4096/1000:+7.1f} K pages")
