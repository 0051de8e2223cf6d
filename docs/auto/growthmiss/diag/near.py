import sys, pickle, os
from onnxcomp.planner import ort_pattern as op_
op_.ALIGN=int(os.environ.get("ALIGN","64"))
opt,orig,shapes=pickle.load(open(sys.argv[1],"rb"))
t0,t1,o0,o1=map(int,sys.argv[2:6])
plan=op_.allocation_plan(opt, shapes); blk=op_.pattern_block(plan)
for off,sz,b in sorted((o,s,b) for b,(o,s) in blk.offsets.items()):
    if off+sz>o0 and off<o1 and plan.end[b]>=t0 and plan.start[b]<=t1:
        vals=[y for y,bb in plan.buffer.items() if bb==b]
        print(off, sz, b[-60:], "[%d-%d]"%(plan.start[b],plan.end[b]), plan.nodes[plan.start[b]].op_type, len(vals), "tensors")
