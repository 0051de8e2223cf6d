import cProfile, pstats, numpy as np
import onnxcomp.custom_ops.zfp as zfp
Z = zfp.ZFP()
x = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
p = Z.encode(x, rate=8); Z.decode(p)
pr = cProfile.Profile(); pr.enable()
for _ in range(3000): Z.encode(x, rate=8); Z.decode(p)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
