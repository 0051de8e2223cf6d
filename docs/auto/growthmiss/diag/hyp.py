import sys, json, pickle
from collections import Counter
from onnxcomp.planner import ort_pattern as op_
op_.ALIGN=256
meas=json.load(open("Pmeas.json"))
data={d:pickle.load(open("pk/"+d.replace("/","_")+".pkl","rb")) for d in meas}
ops=Counter()
for d,(opt,o,s) in data.items():
    for n in opt.graph.node: ops[(n.op_type,n.domain)]+=1
def score(inpl, alias=op_.ALIAS):
    res={}
    for d,(opt,o,s) in data.items():
        p=op_.pattern_block(op_.allocation_plan(opt,s,alias=alias,may_inplace=inpl)).size
        res[d]=(p-meas[d]["pattern"])/meas[d]["pattern"]*100
    return res
base=score(op_.MAY_INPLACE)
bad=lambda r: sum(1 for v in r.values() if abs(v)>0.005)
print("base exact-miss:", bad(base), {d[:20]:round(v,2) for d,v in base.items() if abs(v)>0.005})
for (op,dom),c in sorted(ops.items()):
    if (op,dom) in op_.MAY_INPLACE or (op,dom) in op_.ALIAS: continue
    for pair in [((0,0),),((1,0),),((0,0),(1,0))]:
        inpl=dict(op_.MAY_INPLACE); inpl[(op,dom)]=pair
        r=score(inpl)
        if r!=base:
            print(op,dom,pair,"miss",bad(r),{d[:20]:round(v,2) for d,v in r.items() if abs(v)>0.005}, flush=True)
