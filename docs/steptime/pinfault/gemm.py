import sys, onnx
from onnxcomp.analysis import analyze_model
for f in sys.argv[1:]:
    m = onnx.load(f, load_external_data=False); a = analyze_model(m)
    print(f)
    for i, n in enumerate(m.graph.node):
        if n.op_type in ("Gemm", "MatMul", "FusedMatMul"):
            print(" ", i, n.op_type, n.name[:60], [x[:40] for x in n.input], [(o[:40], a.tensors[o].shape, a.tensors[o].nbytes) for o in n.output if o in a.tensors], [(x.name, x.i) for x in n.attribute if x.type == onnx.AttributeProto.INT])
