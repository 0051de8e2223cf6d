"""Serial driver over all tasks of a 2-D tensor: ns CPU per block of variants of the encoder's pack
(modes: 0 = gather+front+step, 1 = +ranges, 2 = +ranges+sparse pack, 3 = +full pack)."""
import sys, time, numpy as np, numba, os
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import _zfp_numba as K
G = K.G

@numba.njit
def run(xi, n, h, w, nblocks, rate, mode, reps):
    budget = rate * 16; nwb = budget // 32
    av = np.int32(budget - 19); lc = np.int32(27)
    S = np.empty(K._ROWS * G, np.int32); O = np.empty(18 * G, np.int32); T = np.empty(16 * G, np.int32)
    R = np.empty(32, np.int64)
    ntasks = (nblocks + G - 1) // G
    pairs = 0
    for t in range(ntasks):
        b0 = t * G; nb = min(nblocks, b0 + G) - b0
        K._gather_s(xi, n, h, w, True, b0, nb, S, T)
        K._front2d(S, nb, lc, av, 9, 149)
        K._step2d(S, nb, lc, av, 9)
        for r in range(reps):
            if mode >= 1 and mode <= 2:
                pairs += K._ranges2d(S, nb, K._RPOS, K._RD + 5, nwb, R)
            if mode == 2:
                K._pack2d_sparse(S, O, nb, nwb, R)
            if mode == 3:
                K._pack2d(S, O, nb, nwb)
    return pairs

x = np.load(sys.argv[1]); flat = x.reshape(-1); lay = zfp.layout_of(x.shape); xi = flat.view(np.int32)
for rate in [int(r) for r in sys.argv[2:]]:
    res = {}
    for m in range(4): run(xi, flat.size, lay.height, lay.width, lay.nblocks, rate, m, 1)
    for rd in range(7):
        for m in range(4):
            for reps in (1, 5):
                c = time.process_time(); p = run(xi, flat.size, lay.height, lay.width, lay.nblocks, rate, m, reps)
                res.setdefault((m, reps), []).append(time.process_time() - c)
    b = {k: min(v) / lay.nblocks * 1e9 for k, v in res.items()}
    # per repetition cost of the mode's extra work = (t(5) - t(1)) / 4
    per = {m: (b[(m, 5)] - b[(m, 1)]) / 4 for m in range(4)}
    print(f"rate {rate}: base {b[(0, 1)]:.1f}; per rep: ranges {per[1]:.2f}, ranges+sparse {per[2]:.2f}, full pack {per[3]:.2f} ns/block; pairs/task {p / 5 / ((lay.nblocks + G - 1) // G):.1f}")
print("load", os.getloadavg())
