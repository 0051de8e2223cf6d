"""User vs system CPU and minor faults per API call (ZFP.encode / ZFP.decode), N calls after warm-up."""
import resource, sys, os
import numpy as np
import onnxcomp.custom_ops.zfp as zfp
Z = zfp.ZFP()
x = np.load(sys.argv[1]); N = int(sys.argv[2]) if len(sys.argv) > 2 else 50
for rate in (8, 16):
    p = Z.encode(x, rate=rate); Z.decode(p)
    for name, f in (("encode", lambda: Z.encode(x, rate=rate)), ("decode", lambda: Z.decode(p))):
        f()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(N):
            f()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        u = (r1.ru_utime - r0.ru_utime) / N * 1e3; s = (r1.ru_stime - r0.ru_stime) / N * 1e3
        print(f"rate {rate} {name}: user {u:.2f} ms, sys {s:.2f} ms, minor faults {(r1.ru_minflt - r0.ru_minflt) / N:.0f} per call "
              f"(MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_')}, load {os.getloadavg()[0]:.2f})")
