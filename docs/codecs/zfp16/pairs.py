"""How many (field, word) pairs does a task really need? Per task: field i can touch word k in some block iff
min_j p_i < 32k+32 and max_j p_{i+1} > 32k (over blocks where field i has width > 0)."""
import sys, numpy as np
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import _zfp_numba as K
x = np.load(sys.argv[1]); flat = x.reshape(-1); lay = zfp.layout_of(x.shape)
xi = flat.view(np.int32)
G = K.G
for rate in [int(r) for r in sys.argv[2:]]:
    budget = rate * 16; nwb = budget // 32
    av = np.int32(budget - 19); lc = np.int32(27)
    S = np.empty(K._ROWS * G, np.int32); T = np.empty(16 * G, np.int32)
    ntasks = (lay.nblocks + G - 1) // G
    tot = 0; totfield = 0; hist = np.zeros(nwb + 1, int)
    for t in range(0, ntasks, 7):
        b0 = t * G; nb = min(lay.nblocks, b0 + G) - b0
        K._gather_s(xi, flat.size, lay.height, lay.width, True, b0, nb, S, T)
        K._front2d(S, nb, lc, av, 9, 149); K._step2d(S, nb, lc, av, 9)
        P = S[K._RPOS * G:(K._RPOS + 17) * G].reshape(17, G)[:, :nb]
        cnt = 0
        for i in range(16):
            nz = P[i + 1] > P[i]
            if not nz.any(): continue
            lo = P[i][nz].min(); hi = P[i + 1][nz].max()
            kk = [k for k in range(nwb) if lo < 32 * k + 32 and hi > 32 * k]
            cnt += len(kk); hist[len(kk)] += 1
        tot += cnt; totfield += 1
    print(f"rate {rate}: mean pairs per task {tot / totfield:.1f} of {16 * nwb}; words-per-field histogram {hist}")
