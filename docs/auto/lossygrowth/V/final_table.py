import json,statistics;M=2**20
tags=open('V/all.txt').read().split()
tags+= [f"R/{n}_lossy" for n in ["mobilenet_v1_s","wide_resnet_s","leaky_vgg","squeezenet_s","plain_deep","densenet_s"]]
rows=[];eb=[];ea=[]
print("| graph | nodes | before: measured (main) | predicted (main) | error | after: measured (branch) | predicted (branch) | error |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for d in tags:
    t=d.replace('/','_')
    try:
        if d.startswith('R/'):
            n=d[2:-6]
            ma=json.load(open(f'R/{n}_lossy.ortdef.json'))['growth_bytes']
            pa=json.load(open(f'R/{n}.lossy.transform.json'))['auto']['ort_defaults']['parts']
            spacer=pa.get('spacer_set_up_bytes',0)
            pa_g=pa['growth_bytes']-spacer; nodes=pa['nodes']
            mb=pb=None
        else:
            ma=json.load(open(f'V/{t}.ortdef.json'))['growth_bytes']
            p2=json.load(open(f'V/{t}.pred2.json')); pa_g=p2['growth_bytes']; nodes=p2['nodes']
            mb=json.load(open(f'V/{t}.ortdef.main.json'))['growth_bytes']
            pb=json.load(open(f'V/{t}.pred.json'))['growth_bytes']
    except Exception as e:
        print('|',d,'| missing',e,'|'); continue
    a=(pa_g-ma)/ma; ea.append(abs(a))
    if mb: b=(pb-mb)/mb; eb.append(abs(b)); bs=f"{mb/M:.2f} | {pb/M:.2f} | {100*b:+.1f} %"
    else: bs="— | — | —"
    print(f"| {d} | {nodes} | {bs} | {ma/M:.2f} | {pa_g/M:.2f} | {100*a:+.1f} % |")
def s(e): return f"n={len(e)}, median |error| {100*statistics.median(e):.1f} %, within 5 %: {sum(x<=.05 for x in e)}, within 10 %: {sum(x<=.1 for x in e)}, largest {100*max(e):.1f} %"
print("\nbefore:", s(eb)); print("after: ", s(ea))
