import sys
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op
MI = 2**20
MEAS = {"W/plain_deep": 20.109*MI, "W/squeezenet_s": 14.156*MI, "W/mobilenet_v1_s": 17.594*MI, "W/wide_resnet_s": 29.695*MI, "W/densenet_s": 60.996*MI, "W/leaky_vgg": 63.171*MI,
        "after/plain_deep": 9860864, "after/densenet_s": 16927744, "after/squeezenet_s": 4060416, "after/mobilenet_v1_s": 4969728,
        "after/wide_resnet_s": 11676160, "after/leaky_vgg": 10323968,
        "exact/squeezenet_s": 10153984, "exact/mobilenet_v1_s": 8397824, "exact/densenet_s": 32564736, "exact/plain_deep": 11796480}
spec = sys.argv[1:]   # OP:DOMAIN:OUTIDX
rules = [(a, b, int(c)) for a, b, c in (s.split(":") for s in spec)]
for d, m in MEAS.items():
    p = Path(f"/tmp/finalgate/{d}/training_model.onnx"); c = Path(f"optcache/{d.replace('/', '_')}.onnx")
    opt = onnx.load(str(c)); sh = op.ort_static_shapes(opt, onnx.load(str(p), load_external_data=False))
    base = op.pattern_block(op.allocation_plan(opt, sh)).size
    sh2 = dict(sh); k = 0
    for n in opt.graph.node:
        for (o, dom, i) in rules:
            if n.op_type == o and n.domain == dom and i < len(n.output) and n.output[i] in sh2:
                sh2[n.output[i]] = (sh2[n.output[i]][0], None); k += 1
    new = op.pattern_block(op.allocation_plan(opt, sh2)).size
    print(f"{d:24s} base {(base-m)/m*100:+.3f} % hyp {(new-m)/m*100:+.3f} % ({k})", flush=True)
