import json,statistics;M=2**20
S35='/work/wt/lossygrowth/docs/auto/stop35'
base={'squeezenet_s':16.68,'mobilenet_v1_s':20.60,'plain_deep':25.87,'wide_resnet_s':63.16,'densenet_s':128.02,'leaky_vgg':132.32}
basepp={}
cols={k:[] for k in ['s34main','s35main','s34br','r']}
print("| net | baseline growth (pp) | stop-34 plan, main | mode plan (stop 35), main | stop-34 plan, branch | **mode plan, branch** | predicted (branch) | step target | nodes | P ×copies | spacers |")
print("|---|---|---|---|---|---|---:|---:|---:|---|---|")
def f(path):
    try: d=json.load(open(path)); return d['growth_bytes']/M, d['extras']['process_peak_bytes']/M
    except Exception: return None
def cell(v,n,key):
    if v is None: return "—"
    cols[key].append(base[n]/v[0]); return f"{v[0]:.2f} ({base[n]/v[0]:.2f}×; pp {v[1]:.1f})"
for n in base:
    b=f(f'{S35}/base.{n}.ortdef.json')
    a=f(f'{S35}/lossy.{n}.ortdef.json'); g=f(f'{S35}/G/{n}_lossy.ortdef.json'); s=f(f'V/S34_{n}.ortdef.json'); r=f(f'R/{n}_lossy.ortdef.json')
    try:
        od=json.load(open(f'R/{n}.lossy.transform.json'))['auto']['ort_defaults']; p=od['parts']
        extra=f"{od['predicted_growth_bytes']/M:.2f} | {od['step_budget_bytes']/M:.2f} | {p['nodes']} | {p['pattern_bytes']/M:.2f} ×{p['pattern_copies']} | {p['spacers'] or '—'}"
    except Exception: extra="— | — | — | — | —"
    print(f"| {n} | {base[n]:.2f} (pp {b[1]:.1f}) | {cell(a,n,'s34main')} | {cell(g,n,'s35main')} | {cell(s,n,'s34br')} | {cell(r,n,'r')} | {extra} |")
for k,v in cols.items():
    if len(v)==6: print(k, 'median %.2f×'%statistics.median(v), sorted(round(x,2) for x in v))
best=[max(cols['s34br'][i], cols['r'][i]) for i in range(len(cols['r']))] if len(cols['r'])==6 else []
if best: print('best of the two plans on the branch, per net: median %.2f×'%statistics.median(best), [round(x,2) for x in best])
