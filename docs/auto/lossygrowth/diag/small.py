import sys, json, onnx
from onnxcomp.planner import ort_growth as og
M=2**20
for d in sys.argv[1:]:
    m=onnx.load(f"{d}/training_model.onnx", load_external_data=False)
    full=og._full_shapes(m)
    small=big=0; n=0; small_t=0
    for node in m.graph.node:
        if node.domain!=og.CODEC_DOMAIN: continue
        n+=1
        for x in list(node.input)+list(node.output):
            if not x: continue
            b=og._nbytes(og._shape_of(full,x))
            if b < 131072: small+=b; small_t+=1
            else: big+=b
    t=d.replace('/','_')
    try:
        meas=json.load(open(f"V/{t}.ortdef.json"))["growth_bytes"]; pred=json.load(open(f"V/{t}.pred2.json"))["growth_bytes"]
    except Exception: meas=pred=0
    print(f"{d:26s} pyops {n:3d} small {small/M:6.2f} MiB ({small_t} tensors) big {big/M:6.2f} | meas-pred {(meas-pred)/M:+.2f}")
