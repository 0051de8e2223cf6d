import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    print(f"\n{f.split('/')[-1]}: steps {d['steps']}, threads {d['intra_threads'] or 'ORT default (2)'}, mmap {d['malloc_mmap_threshold']}, tunables {d.get('glibc_tunables','') or '-'}, load at end {d['load_avg'][0]:.1f}/{d['load_avg'][1]:.1f}")
    for r in d["rows"]:
        print(f"  {r['config']:16s} CPU {r['cpu_min_s']:.3f}/{r['cpu_median_s']:.3f}s  CPU ratio {r['cpu_min_ratio']:.2f}/{r['cpu_ratio']:.2f}  wall {r['wall_min_s']:.3f}/{r['wall_median_s']:.3f}s wall ratio {r['wall_min_ratio']:.2f}/{r['wall_ratio']:.2f}  kernel {r['kernel_median_s']:.3f}s  faults {r['minor_faults_median']:.0f}")
