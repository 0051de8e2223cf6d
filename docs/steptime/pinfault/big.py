import sys, onnx, collections
from onnxcomp.analysis import analyze_model
m = onnx.load(sys.argv[1], load_external_data=False)
a = analyze_model(m)
skip = sys.argv[2] if len(sys.argv) > 2 else "onnxcomp_chunked"
for i, n in enumerate(m.graph.node):
    if skip in n.name: continue
    if n.op_type in {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}: continue
    outs = [(o, a.tensors[o].nbytes) for o in n.output if o in a.tensors and a.tensors[o].nbytes and a.tensors[o].nbytes >= 131072]
    if outs and n.op_type in ("Cast", "Mul", "Clip", "Slice", "Where", "Sub", "Add") or n.domain == "ai.onnx.contrib":
        print(i, n.op_type, n.name[:70], [x[:50] for x in n.input], [(o[:50], b) for o, b in outs])
