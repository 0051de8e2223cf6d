import sys, pickle, json
from onnxcomp.planner import ort_pattern as op_
opt,orig,shapes=pickle.load(open(sys.argv[1],"rb")); obs=json.load(open(sys.argv[2])); k=int(sys.argv[3])
lo_off,hi_off=int(sys.argv[4]),int(sys.argv[5])
import os
op_.ALIGN=int(os.environ.get("ALIGN","64"))
plan=op_.allocation_plan(opt, shapes); blk=op_.pattern_block(plan)
codec=[i for i,n in enumerate(plan.nodes) if n.domain=="ai.onnx.contrib"]
lo,hi=codec[k-1],codec[k]
print("measured", obs["calls"][k].get("changed"))
for s in range(lo,hi):
    for y in plan.nodes[s].output:
        b=plan.buffer.get(y); pl=blk.offsets.get(b)
        if pl and pl[0]+pl[1]>lo_off and pl[0]<hi_off:
            print(s, plan.nodes[s].op_type, plan.kind.get(y), y[-70:], pl, "buf [%d-%d]"%(plan.start[b],plan.end[b]), b[-50:])
