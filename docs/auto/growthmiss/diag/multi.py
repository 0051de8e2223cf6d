# Variant: ORT's per-buffer program counters as lists of [start, end] (AddStart at alloc / reuse, AddEnd at free).
import sys, json, pickle
from collections import defaultdict
from onnxcomp.planner import ort_pattern as op_
op_.ALIGN=256
def plan_multi(model, shapes):
    g=model.graph
    plan=op_.OrtPlan(list(g.node), dict(shapes))
    pre={i.name for i in g.input}|{t.name for t in g.initializer}
    outputs={o.name for o in g.output}
    use=defaultdict(int)
    for n in pre|outputs: use[n]+=1
    for node in plan.nodes:
        for n in [*node.input,*node.output]:
            if n: use[n]+=1
    for n in pre: plan.buffer[n],plan.kind[n]=n,"input"
    def same(a,b):
        sa,sb=plan.shapes.get(a),plan.shapes.get(b)
        if sa is None or sb is None or sa[1] is None or sb[1] is None: return False
        if 8 in (sa[0],sb[0]) or 0 in (sa[0],sb[0]): return False
        return op_._itemsize(sa[0])==op_._itemsize(sb[0]) and sa[1]==sb[1]
    def share(r,v,k):
        o=plan.buffer[r]; plan.buffer[v]=o; use[o]+=use[v]; plan.kind[v]=k
    starts=defaultdict(list); ends=defaultdict(list)
    free=[]
    for step,node in enumerate(plan.nodes):
        key=(node.op_type,node.domain)
        for k,y in enumerate(node.output):
            if not y: continue
            plan.buffer[y]=y
            if y in outputs: plan.kind[y]="output"; continue
            src=next((node.input[i] for i,o in op_.ALIAS.get(key,()) if o==k and i<len(node.input) and node.input[i]),None)
            if src is not None: share(src,y,"alias"); continue
            src=next((node.input[i] for i,o in op_.MAY_INPLACE.get(key,()) if o==k and i<len(node.input) and node.input[i] and use[plan.buffer[node.input[i]]]==1 and same(node.input[i],y)),None)
            if src is not None: share(src,y,"inplace"); continue
            s=plan.shapes.get(y); hit=None
            if s is not None and s[1] is not None and len(s[1])>0:
                hit=next((j for j,b in enumerate(free) if same(b,y)),None)
            if hit is not None:
                b=free.pop(hit); share(b,y,"reuse")
                if plan.kind.get(b)=="alloc": starts[b].append(step)
            else:
                plan.kind[y]="alloc"; starts[y].append(step)
        for n in [*node.input,*node.output]:
            if n and n in plan.buffer:
                o=plan.buffer[n]; use[o]-=1
                if use[o]==0:
                    free.insert(0,o)
                    if plan.kind.get(o)=="alloc": ends[o].append(step)
    N=len(plan.nodes)
    for b in starts:
        while len(ends[b])<len(starts[b]): ends[b].append(N)
    return plan, starts, ends
def layout(plan, starts, ends):
    placed={}; total=0; order=[]
    def ov(a,b):
        return any(s2<=e1 and e2>=s1 for s1,e1 in zip(starts[a],ends[a]) for s2,e2 in zip(starts[b],ends[b]))
    blocks=[]
    for step,node in enumerate(plan.nodes):
        for y in node.output:
            if not y or plan.kind.get(y)!="alloc": continue
            size=plan.nbytes(y)
            if size==0: continue
            current=0; waste=None; best=None
            for b in blocks:
                if not ov(b,y): continue
                off,sz=placed[b]
                if off>=current:
                    gap=off-current
                    if gap>=size and (waste is None or gap-size<waste): waste,best=gap-size,current
                current=max(current,off+sz)
            if current<total and total-current>=size and (waste is None or total-current-size<waste): best=current
            if best is None: best=current
            total=max(total,best+size); placed[y]=(best,size)
            at=next((k for k,b in enumerate(blocks) if placed[b][0]>best or (placed[b][0]==best and placed[b][1]>=size)),len(blocks))
            blocks.insert(at,y)
    return total
meas=json.load(open("Pmeas.json"))
for d,m in meas.items():
    opt,orig,shapes=pickle.load(open("pk/"+d.replace("/","_")+".pkl","rb"))
    p=layout(*plan_multi(opt,shapes))
    print(d[:28].ljust(28), m["pattern"], p, "%+.2f%%"%((p-m["pattern"])/m["pattern"]*100), flush=True)
