import json,sys,statistics;M=2**20
suffix=sys.argv[1] if len(sys.argv)>1 else ''
tags=open('/tmp/lossygrowth/V/all.txt').read().split()
errs=[];rows=[]
for d in tags:
    t=d.replace('/','_')
    m=json.load(open(f'V/{t}.ortdef.json')); s=json.load(open(f'V/{t}.split.json')); p=json.load(open(f'V/{t}.pred{suffix}.json'))
    st=max(s['steps'][1:],key=lambda x:x['growth']); ps=st['post_smaps']
    meas=m['growth_bytes']; pred=p['growth_bytes']; e=(pred-meas)/meas; errs.append(abs(e))
    print(f"| {d:24s} | {meas/M:6.2f} | {pred/M:6.2f} | {100*e:+6.1f} % | P {p['pattern_bytes']/M:5.2f} x{p['pattern_copies']} | arena {p['arena_bytes']/M:6.2f} vs anon {ps['anon']/M:6.2f} | nodes {p['nodes']:5d} {p['node_bytes']/M:4.2f} + pyheap {p['heap_bytes']/M:4.2f} + {p.get('step_heap_bytes',0)/M:4.2f} vs heap {ps['heap']/M:4.2f} | resid {p['residue_bytes']/M:4.2f} file {ps['file']/M:4.2f} |")
print('n',len(errs),'median |err| %.1f %%'%(100*statistics.median(errs)),'within 5%',sum(e<=.05 for e in errs),'within 10%',sum(e<=.1 for e in errs), 'max %.0f%%'%(100*max(errs)))
