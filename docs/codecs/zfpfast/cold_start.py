import time, resource, numpy as np
import onnxcomp.custom_ops.zfp as zfp
Z = zfp.ZFP()
x2 = np.maximum(np.random.default_rng(0).standard_normal((2, 3, 9, 10)), 0).astype(np.float32)
x1 = np.random.default_rng(1).standard_normal(1001).astype(np.float32)
for x in (x2, x1):
    Z.decode(Z.encode(x, rate=8))
r = resource.getrusage(resource.RUSAGE_SELF)
print(f"process CPU {r.ru_utime + r.ru_stime:.2f} s, wall since start n/a")
