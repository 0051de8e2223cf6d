import sys,json
M=2**20
def f(d): return {k:round(v/M,2) for k,v in d.items() if k not in ('hblks','anon_n')}
for l in sys.stdin:
    try: r=json.loads(l)
    except Exception: continue
    if 'step' not in r: print('setup', round(r['setup_rss']/M,2), f(r['mi']), f(r['smaps'])); continue
    print(r['step'], 'peak',round(r['peak']/M,2), 'smp',round(r.get('sampled_max',0)/M,2), 't',r['t'], 'pre',f(r['pre_mi']), f(r['pre_smaps']))
    if r.get('mi_at_max'): print('   at', f(r['mi_at_max']))
    print('   post', f(r['post_mi']), f(r['post_smaps']))
