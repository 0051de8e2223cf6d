import resource, time, tempfile, sys
from pathlib import Path
from onnxcomp.custom_ops.cpu import aot
d = Path(tempfile.mkdtemp(dir="/tmp/aotlossy"))
aot.cache_dirs = lambda: [d]
for name in sorted(aot.MODULES):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t = time.time()
    p = aot._built(name)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{name}: child CPU {r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime:.1f} s, wall {time.time() - t:.1f} s, "
          f"max child RSS {r1.ru_maxrss / 1024:.0f} MiB, .so {p.stat().st_size / 1e3:.0f} kB, code {p.with_name(aot.module_name(name) + aot.CODE_SUFFIX).stat().st_size / 1e3:.0f} kB", flush=True)
