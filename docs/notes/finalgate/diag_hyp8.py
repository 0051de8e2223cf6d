import sys, inspect, textwrap
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op
src = inspect.getsource(op.allocation_plan)
old = "            if s is not None and s[1] is not None and len(s[1]) > 0:\n"
assert old in src
src = src.replace(old, "            if s is not None and s[1] is not None and len(s[1]) > 0 and (y in READ or MODE == 'none'):\n")
src = src.replace("def allocation_plan(", "def allocation_plan2(")
ns = dict(vars(op)); exec(src, ns); ap2 = ns["allocation_plan2"]
MI = 2**20
MEAS = {"W/plain_deep": 20.109*MI, "W/squeezenet_s": 14.156*MI, "W/mobilenet_v1_s": 17.594*MI, "W/wide_resnet_s": 29.695*MI, "W/densenet_s": 60.996*MI, "W/leaky_vgg": 63.171*MI,
        "after/plain_deep": 9860864, "after/densenet_s": 16927744, "after/squeezenet_s": 4060416, "after/mobilenet_v1_s": 4969728,
        "after/wide_resnet_s": 11676160, "after/leaky_vgg": 10323968,
        "exact/squeezenet_s": 10153984, "exact/mobilenet_v1_s": 8397824, "exact/densenet_s": 32564736, "exact/plain_deep": 11796480}
ns["MODE"] = "unread"
for d, m in MEAS.items():
    p = Path(f"/tmp/finalgate/{d}/training_model.onnx"); c = Path(f"optcache/{d.replace('/', '_')}.onnx")
    opt = onnx.load(str(c)); sh = op.ort_static_shapes(opt, onnx.load(str(p), load_external_data=False))
    ns["READ"] = {x for n in opt.graph.node for x in n.input} | {o.name for o in opt.graph.output}
    base = op.pattern_block(op.allocation_plan(opt, sh)).size
    new = op.pattern_block(ap2(opt, sh)).size
    print(f"{d:24s} base {(base-m)/m*100:+.3f} % unread-no-reuse {(new-m)/m*100:+.3f} % ({int(new - m):+d} B)", flush=True)
