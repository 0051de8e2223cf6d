import json,glob,sys
M=2**20
for f in sorted(glob.glob('/tmp/lossygrowth/diag/*.split.json')):
    try: d=json.load(open(f))
    except Exception: print(f,'bad'); continue
    st=d['steps']; g=max(s['growth'] for s in st[1:])
    s=max(st[1:],key=lambda s:s['growth'])
    ps=s['post_smaps']; pr=s['pre_smaps']
    print(f"{f.split('/')[-1][:-11]:24s} growth {g/M:6.2f} | post: heap {ps['heap']/M:5.2f} anon {ps['anon']/M:6.2f} file {ps['file']/M:4.2f} | pre: heap {pr['heap']/M:5.2f} anon {pr['anon']/M:6.2f} | setup heap free {d['setup_mi']['fordblks']/M:5.2f} used {d['setup_mi']['uordblks']/M:6.2f} step0 growth {st[0]['growth']/M:6.2f}")
