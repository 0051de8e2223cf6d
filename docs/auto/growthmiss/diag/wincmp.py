import sys, pickle, json
from onnxcomp.planner import ort_pattern as op_
opt,orig,shapes=pickle.load(open(sys.argv[1],"rb")); obs=json.load(open(sys.argv[2]))
import os
op_.ALIGN=int(os.environ.get("ALIGN","64"))
plan=op_.allocation_plan(opt, shapes); blk=op_.pattern_block(plan)
codec=[i for i,n in enumerate(plan.nodes) if n.domain=="ai.onnx.contrib"]
TOL=8192
def cover(regs, a, b):
    # bytes of [a,b) not covered by regs (with tolerance)
    un=0; x=a
    for ra,rb in sorted(regs):
        ra-=TOL; rb+=TOL
        if rb<=x: continue
        if ra> x: un+=min(ra,b)-x
        x=max(x,rb)
        if x>=b: break
    if x<b: un+=b-x
    return un
for k in range(1,len(codec)):
    lo,hi=codec[k-1],codec[k]
    rep=[]; names=[]
    for s in range(lo,hi):
        for y in plan.nodes[s].output:
            b=plan.buffer.get(y); pl=blk.offsets.get(b)
            if pl and plan.kind.get(y) in ("alloc","reuse","inplace"):
                rep.append((pl[0],pl[0]+pl[1])); names.append((s,y,pl))
    meas=obs["calls"][k].get("changed",[])
    bad=[(a,b-a,cover(rep,a,b)) for a,b in meas if cover(rep,a,b)>65536]
    if bad:
        print("window %d (nodes %d-%d): measured writes outside the replay's:"%(k,lo,hi-1), bad)
        for s,y,pl in names:
            if pl[1]>=1<<20: print("     replay", s, plan.nodes[s].op_type, y[-60:], pl)
