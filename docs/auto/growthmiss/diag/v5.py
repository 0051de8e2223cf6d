import json, pickle, sys
from onnxcomp.planner import ort_pattern as op_
meas=json.load(open("Pmeas.json"))
res={}
for d,m in meas.items():
    opt,orig,shapes=pickle.load(open("pk/"+d.replace("/","_")+".pkl","rb"))
    read={x for n in opt.graph.node for x in n.input}
    outs={o.name for o in opt.graph.output}
    sh=dict(shapes)
    mode=sys.argv[1]
    for n in opt.graph.node:
        for k,y in enumerate(n.output):
            if y and y not in read and y not in outs:
                if mode=="outside" or (mode=="outside_bn" and n.op_type=="BatchNormInternal"):
                    sh[y]=(sh.get(y,(1,None))[0],None)
    p=op_.pattern_block(op_.allocation_plan(opt,sh)).size
    res[d]=(p-m["pattern"])/m["pattern"]*100
print(sys.argv[1], sum(abs(x)>0.005 for x in res.values()), {d[:22]:round(x,2) for d,x in res.items() if abs(x)>0.005})
