import sys, collections
M=2**20
lines=open(sys.argv[1]).read().splitlines()
# take step 2
st=lines.index("STEP 2"); en=lines.index("END")
live={}; cur=0; peak=0; sizes=collections.Counter(); order=[]
for l in lines[st+1:en]:
    p=l.split()
    if p[0] in "MCRA":
        sz=int(p[1]); live[p[2]]=sz; cur+=sz; peak=max(peak,cur); sizes[sz]+=1; order.append(sz)
    elif p[0]=="F" and p[1] in live:
        cur-=live.pop(p[1])
print("allocs", sum(sizes.values()), "peak live %.2f MiB"%(peak/M), "still live %.2f"%(cur/M))
for sz,c in sorted(sizes.items(), key=lambda kv:-kv[0]*kv[1])[:15]: print(sz, c)
