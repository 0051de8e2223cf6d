import json, pickle, sys, inspect as _i
from onnxcomp.planner import ort_pattern as op_
src=_i.getsource(op_.allocation_plan).replace("def allocation_plan(","def ap(")
src=src.replace("alias: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = ALIAS","alias=ALIAS").replace("may_inplace: Mapping[tuple[str, str], Sequence[tuple[int, int]]] = MAY_INPLACE","may_inplace=MAY_INPLACE").replace("-> OrtPlan:",":")
mode=sys.argv[1]
if mode=="C1":   # unread + no freed match -> outside P
    src=src.replace('''            else:
                plan.kind[y] = "alloc"''','''            else:
                plan.kind[y] = "alloc"
                if y not in read and y not in outputs: plan.shapes[y] = (plan.shapes.get(y, (1, None))[0], None)''')
if mode=="C2":   # unread + would reuse -> outside P instead
    src=src.replace('''            if hit is not None:
                share(free.pop(hit), y, "reuse")''','''            if hit is not None and y not in read and y not in outputs:
                plan.kind[y] = "alloc"; plan.shapes[y] = (plan.shapes.get(y, (1, None))[0], None)
            elif hit is not None:
                share(free.pop(hit), y, "reuse")''')
ns=dict(vars(op_)); exec(src, ns); ap=ns["ap"]
meas=json.load(open("Pmeas.json")); res={}
for d,m in meas.items():
    opt,orig,shapes=pickle.load(open("pk/"+d.replace("/","_")+".pkl","rb"))
    p=op_.pattern_block(ap(opt,shapes)).size; res[d]=(p-m["pattern"])/m["pattern"]*100
print(mode, sum(abs(x)>0.005 for x in res.values()), {d[:22]:round(x,2) for d,x in res.items() if abs(x)>0.005})
