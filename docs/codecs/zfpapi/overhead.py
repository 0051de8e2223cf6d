import time, numpy as np
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu; cpu.threading_layer()
from onnxcomp.custom_ops import _zfp_numba as K
Z = zfp.ZFP()
x = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
lay = zfp.layout_of(x.shape); flat = x.reshape(-1)
p = Z.encode(x, rate=8); w = np.empty(zfp.data_words(lay, 8), np.uint32); y = np.empty(16, np.float32)
a = (16, 4, 4, lay.nblocks, True, 8, 26, 9, 149)
def t(f, n=3000):
    f(); best = 1e9
    for _ in range(5):
        c = time.process_time()
        for _ in range(n): f()
        best = min(best, (time.process_time() - c) / n)
    return best * 1e6
print(f"one 4x4 block: ZFP.encode {t(lambda: Z.encode(x, rate=8)):.1f} us CPU, kernel encode {t(lambda: K.encode(flat, *a, w)):.1f} us; "
      f"ZFP.decode {t(lambda: Z.decode(p)):.1f} us, kernel decode {t(lambda: K.decode(p[1], *a, y)):.1f} us")
