import sys, json
from pathlib import Path
import onnx
from onnxcomp.planner import ort_pattern as op_
M=2**20
d=Path(sys.argv[1]); obs=json.load(open(sys.argv[2]))
orig=onnx.load(str(d/"training_model.onnx"), load_external_data=False)
opt=op_.ort_optimized_model(d/"training_model.onnx")
shapes=op_.ort_static_shapes(opt, orig)
import os
op_.ALIGN=int(os.environ.get("ALIGN","64"))
plan=op_.allocation_plan(opt, shapes); blk=op_.pattern_block(plan)
print("replay P", blk.size, "measured", obs["P"])
codec=[(i,n) for i,n in enumerate(plan.nodes) if n.domain=="ai.onnx.contrib"]
print(len(codec), "codec nodes;", len(obs["calls"]), "calls")
for (step,n),c in zip(codec, obs["calls"]):
    assert n.op_type==c["op"], (n.op_type,c["op"])
    for x,(nb,off) in zip(n.input, c["inputs"]):
        b=plan.buffer.get(x); pl=blk.offsets.get(b)
        rep = pl[0] if pl else None
        flag = "" if rep==off else "  <-- DIFF"
        if nb>=4096: print("%5d %-28s %-70s %9d meas %10s rep %10s [%s %d-%d]%s"%(step, n.op_type[-20:], x[:70], nb, off, rep, b[:50] if b else None, plan.start.get(b,-1), plan.end.get(b,-1), flag))
