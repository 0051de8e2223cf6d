# Lay out the no-pattern run's measured allocations (arena off, reuse on) with MemPatternPlanner's best fit.
import sys
from collections import defaultdict
lines=open(sys.argv[1]).read().splitlines()
step=sys.argv[2] if len(sys.argv)>2 else "STEP 2"
st=lines.index(step); en=[i for i,l in enumerate(lines) if i>st and (l.startswith("STEP") or l=="END")][0]
bufs=[]; live={}; ev=0
for l in lines[st+1:en]:
    p=l.split()
    if p[0]=="A":
        live[p[2]]=len(bufs); bufs.append([ev,None,-(-int(p[1])//64)*64]); ev+=1
    elif p[0]=="F" and p[1] in live:
        bufs[live.pop(p[1])][1]=ev; ev+=1
for b in bufs:
    if b[1] is None: b[1]=ev
placed=[]; total=0; blocks=[]
for i,(s,e,size) in enumerate(bufs):
    blocks=[j for j in blocks if bufs[j][1]>=s]
    current=0; waste=None; best=None
    for j in sorted(blocks, key=lambda j:(placed[j][0],placed[j][1])):
        off,sz=placed[j]
        if off>=current:
            gap=off-current
            if gap>=size and (waste is None or gap-size<waste): waste,best=gap-size,current
        current=max(current,off+sz)
    if current<total and total-current>=size and (waste is None or total-current-size<waste): best=current
    if best is None: best=current
    total=max(total,best+size)
    placed.append((best,size)); blocks.append(i)
print("measured-interval layout: %d B (%.3f MiB), %d buffers"%(total,total/2**20,len(bufs)))
top=sorted(range(len(bufs)), key=lambda i:-(placed[i][0]+placed[i][1]))[:8]
for i in top: print(i, bufs[i], placed[i])
