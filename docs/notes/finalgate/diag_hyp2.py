import sys, json
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op
MEAS = {"before/densenet_s": 16927744, "before/squeezenet_s": 4060416, "before/mobilenet_v1_s": 4969728,
        "before/plain_deep": 10140416}
cache = Path("/tmp/finalgate/diag/optcache"); cache.mkdir(exist_ok=True)
def load(d):
    p = Path("/tmp/finalgate") / d / "training_model.onnx"
    c = cache / (d.replace("/", "_") + ".onnx")
    if not c.exists():
        onnx.save(op.ort_optimized_model(p), str(c))
    opt = onnx.load(str(c)); orig = onnx.load(str(p), load_external_data=False)
    return opt, op.ort_static_shapes(opt, orig)
extra = {}
for spec in sys.argv[1:]:
    name, dom, i, o = spec.split(":")
    extra.setdefault((name, dom), []).append((int(i), int(o)))
mi = {**op.MAY_INPLACE, **{k: tuple(v) for k, v in extra.items()}}
for d, m in MEAS.items():
    opt, shapes = load(d)
    base = op.pattern_block(op.allocation_plan(opt, shapes)).size
    plan = op.allocation_plan(opt, shapes, may_inplace=mi)
    new = op.pattern_block(plan).size
    changed = sum(1 for n in opt.graph.node if (n.op_type, n.domain) in extra and plan.kind.get(n.output[0]) == "inplace")
    print(f"{d:28s} meas {m:9d} base {(base-m)/m*100:+.2f} % hyp {(new-m)/m*100:+.2f} % ({changed} in place)")
