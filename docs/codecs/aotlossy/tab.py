import json, sys, glob, os
MiB = 2**20
os.chdir(sys.argv[1])
tags = sorted({f.split('.main.json')[0] for f in glob.glob('*.main.json')})
print("| graph | process peak main → aot (MiB) | growth main → aot (MiB) | codec_kernel_bytes main → aot (MiB) | rss_setup main → aot | losses equal |")
print("|---|---:|---:|---:|---:|:-:|")
for t in tags:
    try:
        a = json.load(open(f'{t}.main.json')); b = json.load(open(f'{t}.aot.json'))
    except Exception as e:
        print(t, "ERR", e); continue
    f = lambda d, k: d['extras'].get(k) if k in d['extras'] else d.get(k)
    row = [f"{f(a,k)/MiB:.1f} → {f(b,k)/MiB:.1f}" for k in ('process_peak_bytes','growth_bytes','codec_kernel_bytes','rss_setup_bytes')]
    print(f"| {t} | " + " | ".join(row) + f" | {'yes' if a['losses']==b['losses'] else 'NO'} |")
