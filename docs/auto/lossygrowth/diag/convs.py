import sys, collections, math, onnx
from onnxcomp.planner import ort_growth as og
from onnxcomp.planner.ort_pattern import ort_optimized_model, ort_static_shapes, _declared
path=sys.argv[1]
orig=onnx.load(path, load_external_data=False)
opt=ort_optimized_model(path)
full=og._full_shapes(orig); full.update({k:v for k,v in _declared(opt).items() if v[1] is not None and k not in full})
shapes={**full, **{k:v for k,v in ort_static_shapes(opt, orig).items() if v[1] is not None}}
c=collections.Counter()
for n in opt.graph.node:
    if n.op_type in ("Conv","FusedConv","ConvGrad"):
        if n.op_type=="ConvGrad": x,w,y=n.input[1],n.input[2],n.input[0]
        else: x,w,y=n.input[0],n.input[1],n.output[0]
        X,W,Y=shapes.get(x),shapes.get(w),shapes.get(y)
        if not (X and W and Y and X[1] and W[1] and Y[1]): c[(n.op_type,'?')]+=1; continue
        N=X[1][0]; g=og._attr(n,'group',1); pix=math.prod(Y[1][2:]); k=math.prod(W[1][2:])
        one=4*W[1][1]*k*pix
        c[(n.op_type, tuple(X[1]), tuple(W[1]), tuple(Y[1]), g, one, og.conv_scratch(n, shapes)[:1][0] if og.conv_scratch(n, shapes) else 0)]+=1
for k,v in sorted(c.items(), key=lambda kv: str(kv[0])): print(v, k)
