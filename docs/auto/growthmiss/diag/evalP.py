import sys, json, pickle, os, importlib
from onnxcomp.planner import ort_pattern as op_
meas=json.load(open("Pmeas.json"))
variants=sys.argv[1].split(",") if len(sys.argv)>1 else ["64","256"]
cache={}
for d,m in meas.items():
    opt,orig,shapes=pickle.load(open("pk/"+d.replace("/","_")+".pkl","rb"))
    row=[d[:28].ljust(28), "%10d"%m["pattern"]]
    for v in variants:
        op_.ALIGN=int(v)
        p=op_.pattern_block(op_.allocation_plan(opt,shapes)).size
        row.append("%10d %+7.2f%%"%(p,(p-m["pattern"])/m["pattern"]*100))
    print(" ".join(row), flush=True)
