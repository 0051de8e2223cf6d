import sys, json, pickle
from collections import defaultdict
from onnxcomp.planner import ort_pattern as op_
op_.ALIGN=256
import inspect as _i
src=_i.getsource(op_.allocation_plan)
meas=json.load(open("Pmeas.json"))
data={d:pickle.load(open("pk/"+d.replace("/","_")+".pkl","rb")) for d in meas}
def variant(v):
    s=src.replace("def allocation_plan(","def ap(")
    s=s.replace("alias: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = ALIAS","alias=ALIAS").replace("may_inplace: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = MAY_INPLACE","may_inplace=MAY_INPLACE").replace("-> OrtPlan:",":")
    s=s.replace("    free: list[str] = []","    readers=set(x for nd in g.node for x in nd.input)\n    free: list[str] = []")
    if v in ("V1","V3"):
        s=s.replace("                if use[original] == 0:\n                    free.insert(0, original)","                if use[original] == 0 and (original in readers or plan.kind.get(original)!='alloc'):\n                    free.insert(0, original)")
    if v=="V1":
        s=s.replace("            if s is not None and s[1] is not None and len(s[1]) > 0:","            if s is not None and s[1] is not None and len(s[1]) > 0 and y in readers:")
    if v=="V4":
        # a buffer whose latest tensor nobody reads is never freed, and lives to the step's end
        s=s.replace("                if use[original] == 0:\n                    free.insert(0, original)","                if use[original] == 0 and name in readers:\n                    free.insert(0, original)")
        s=s.replace("    plan.end.update(last)","    plan.end.update(last)\n    for y,k in plan.kind.items():\n        if k=='reuse' and y not in readers and y not in outputs and plan.kind.get(plan.buffer[y])=='alloc': plan.end[plan.buffer[y]]=n")
    if v=="V2":
        s=s.replace("plan.start[y], plan.end[y] = step, n ","plan.start[y], plan.end[y] = step, step ")
    ns=dict(vars(op_)); exec(s, ns); return ns["ap"]
for v in sys.argv[1].split(","):
    ap=variant(v); out={}
    for d,(opt,o,sh) in data.items():
        p=op_.pattern_block(ap(opt,sh)).size; out[d]=(p-meas[d]["pattern"])/meas[d]["pattern"]*100
    print(v, sum(abs(x)>0.005 for x in out.values()), {d[:22]:round(x,2) for d,x in out.items() if abs(x)>0.005}, flush=True)
