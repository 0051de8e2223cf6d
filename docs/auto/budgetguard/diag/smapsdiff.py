"""Diagnosis: where the growth over set-up sits (per mapping class) under ORT defaults. Mirrors _measure_worker."""
import json, sys, re
from pathlib import Path
from onnxcomp.runtime import _measure_worker as mw
from onnxcomp.runtime.proc_memory import measure_call, status_bytes, trim_heap

def smaps():
    out = {}
    cur = None
    for line in open('/proc/self/smaps'):
        if re.match(r'^[0-9a-f]+-[0-9a-f]+ ', line):
            parts = line.split()
            a, b = (int(x, 16) for x in parts[0].split('-'))
            name = parts[5] if len(parts) > 5 else ''
            cur = (a, b, name + ' ' + parts[1]); out[cur] = 0
        elif line.startswith('Rss:') and cur is not None:
            out[cur] = int(line.split()[1]) * 1024
    return out

import ctypes
_libc = ctypes.CDLL("libc.so.6")
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
def minfo():
    f = _libc.fopen(b"/tmp/budgetguard/diag/minfo.xml", b"w")
    _libc.malloc_info(0, f); _libc.fclose(f)
    x = open("/tmp/budgetguard/diag/minfo.xml").read()
    out = []
    for h in re.findall(r'<heap nr="(\d+)">(.*?)</heap>', x, re.S):
        cur = re.search(r'<system type="current" size="(\d+)"', h[1])
        tot = re.search(r'<total type="fast" count="\d+" size="(\d+)"/>\s*<total type="rest" count="\d+" size="(\d+)"/>', h[1])
        out.append((h[0], int(cur.group(1)) if cur else None, (int(tot.group(1)) + int(tot.group(2))) if tot else None))
    return out

def cls(k):
    a, b, name = k
    nm = name.split(' ')[0]
    if nm == '[heap]': return 'heap'
    if nm == '': 
        size = b - a
        return 'anon>=1M' if size >= (1 << 20) else 'anon<1M'
    return 'file/other'

def diff(s0, s1):
    d = {}
    keys = set(s0) | set(s1)
    for k in keys:
        c = cls(k)
        d[c] = d.get(c, 0) + s1.get(k, 0) - s0.get(k, 0)
    return d

def run(cfg):
    import onnxruntime as ort
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session
    ort.set_default_logger_severity(3)
    settings = RuntimeSettings.from_dict(cfg["settings"])
    session = open_artifact_session(Path(cfg["artifact_dir"]), Path(cfg["model"]), settings=settings, seed=0, bounds={})
    spec = graph_data(Path(cfg["artifact_dir"]), Path(cfg["model"]), list(session.module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    batches = [next(gen) for _ in range(4)]
    del gen
    mw._load_codec_kernels(Path(cfg["model"]))
    import tracemalloc, os as _os
    if _os.environ.get("TM"): tracemalloc.start(12)
    trim_heap()
    rss_setup = status_bytes("VmRSS")
    s0 = smaps()
    import os
    lf = os.environ.get("MALLOC_LOG_FILE")
    mark = (lambda t: open(lf, "a").write(f"MARK {t}\n")) if lf else (lambda t: None)
    mark("setup")
    print("malloc arenas at setup (nr, system, free):", [(a, round(b/2**20,3), round(c/2**20,3)) for a,b,c in minfo()])
    for i, (x, y) in enumerate(batches):
        mark(f"step{i}")
        m = measure_call(lambda: session.step(x, y), trim=True)
        mark(f"end{i}")
        s1 = smaps()
        end = status_bytes("VmRSS")
        d = diff(s0, s1)
        bystart0 = {k[0]: v for k, v in s0.items()}
        top = sorted(((v - bystart0.get(k[0], 0), k) for k, v in s1.items()), reverse=True)[:8]
        print("   top deltas:", [(round(dv/2**20,3), hex(k[0]), round((k[1]-k[0])/2**20,3), k[2]) for dv, k in top if dv > 16384])
        print("   malloc arenas (nr, system, free):", [(a, round(b/2**20,3), round(c/2**20,3)) for a,b,c in minfo()])
        new_big = sorted(((k[1]-k[0], s1[k]) for k in s1 if k not in s0 and cls(k) == 'anon>=1M'))
        print(f"step {i}: growth(HWM-setup) {(m.hwm-rss_setup)/2**20:.3f} MiB, end-resident {(end-rss_setup)/2**20:.3f}, "
              f"transient {(m.hwm-end)/2**20:.3f}; by class (MiB): " + ", ".join(f"{c} {v/2**20:+.3f}" for c, v in sorted(d.items())))
        print("   new anon>=1M mappings (size, rss):", [(round(a/2**20,3), round(b/2**20,3)) for a, b in new_big])
    if tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot()
        for st in snap.statistics("traceback")[:6]:
            if st.size < 32768: break
            print("TM", st.size, st.count); print("\n".join("    " + l for l in st.traceback.format()[-14:]))
    return {}

if __name__ == '__main__':
    d = sys.argv[1]
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.load import resolve_training_run
    st = RuntimeSettings.from_dict({'arena': True, 'mem_pattern': True, 'mem_reuse': True, 'execution_order': 'default'})
    cfg = {"artifact_dir": d, "model": str(resolve_training_run(Path(d), None)), "settings": st.to_dict()}
    run(cfg)
