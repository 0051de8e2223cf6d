import sys, collections, onnx
from onnxcomp.analysis import analyze_model
m = onnx.load(sys.argv[1], load_external_data=False)
a = analyze_model(m)
pat = sys.argv[2] if len(sys.argv) > 2 else "Cast"
for name, t in a.tensors.items():
    if t.producer is None or not t.nbytes or t.nbytes < 128 * 1024: continue
    n = m.graph.node[t.producer]
    if n.op_type != pat: continue
    ins = [(i[:40], str(a.tensors[i].type) if i in a.tensors else "?") for i in n.input]
    cons = [m.graph.node[c].op_type for c in (a.tensors[name].consumers )]
    print(n.name[:60], ins, "->", t.type, t.nbytes / 2**20, cons)
