import sys, collections
M=2**20
lines=open(sys.argv[1]).read().splitlines()
step = sys.argv[2] if len(sys.argv)>2 else "STEP 2"
st=lines.index(step); nxt=[i for i,l in enumerate(lines) if i>st and (l.startswith("STEP") or l=="END")][0]
body=lines[st+1:nxt]
firstA=[l for l in body if l.startswith("A ")][0]
print("P =", firstA.split()[1], "%.3f MiB"%(int(firstA.split()[1])/M))
for kind in ("A","MCR"):
    live={}; cur=0; peak=0; sizes=collections.Counter(); skipP=True
    for l in body:
        p=l.split()
        if p[0] in "MCRA" and len(p)==3:
            if p[0] not in kind: continue
            if kind=="A" and skipP: skipP=False; continue
            sz=int(p[1]); live[p[2]]=sz; cur+=sz; peak=max(peak,cur); sizes[sz]+=1
        elif p[0]=="F" and p[1] in live:
            cur-=live.pop(p[1])
    print(kind, "allocs", sum(sizes.values()), "peak live %.2f MiB"%(peak/M), "still live at end %.2f"%(cur/M), [(s,c) for s,c in sorted(sizes.items(), key=lambda kv:-kv[0]*kv[1])[:12]])
