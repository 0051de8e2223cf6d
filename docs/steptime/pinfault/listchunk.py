import sys, onnx
from onnxcomp.analysis import analyze_model
m = onnx.load(sys.argv[1], load_external_data=False)
a = analyze_model(m)
pat = sys.argv[2] if len(sys.argv) > 2 else "onnxcomp_chunked"
for i, n in enumerate(m.graph.node):
    if pat in n.name or any(pat in o for o in n.output):
        outs = [(o, a.tensors[o].nbytes if o in a.tensors else None) for o in n.output]
        print(i, n.op_type, n.name, [x for x in n.input], outs)
