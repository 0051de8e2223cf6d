"""Compute cost of each encoder stage in isolation, ns CPU per block: the stage functions of one or more module
copies (MODULE names importable from /tmp/zfp16d) are run REPS times on the scratch of a real task (L1-resident;
every stage is branch-free, so its cost does not depend on the values it re-reads), single thread, interleaved
over modules, best of ROUNDS. The gather is timed over every task of the tensor (it streams the tensor).
Usage: stagebench.py TENSOR.npy MOD1,MOD2 RATE..."""
import importlib, os, sys, time
import numba
import numpy as np
sys.path.insert(0, "/tmp/zfp16d")
import onnxcomp.custom_ops.zfp as zfp

x = np.load(sys.argv[1]); flat = x.reshape(-1); xi = flat.view(np.int32); lay = zfp.layout_of(x.shape)
mods = {m: importlib.import_module(m) for m in sys.argv[2].split(",")}
rates = [int(r) for r in sys.argv[3:]]
REPS = int(os.environ.get("REPS", "2000")); ROUNDS = int(os.environ.get("ROUNDS", "15"))


def drivers(K):
    G = K.G

    @numba.njit
    def prep(xi, n, h, w, nblocks, t, rate, S, O, R, S0):
        budget = rate * 16; avail = budget - 19; nwb = (budget + 31) // 32
        b0 = t * G; nb = min(nblocks, b0 + G) - b0
        K._gather_s(xi, n, h, w, True, b0, nb, S, O[:16 * G])
        S0[:] = S[:16 * G]
        K._front2d(S, nb, np.int32(27), np.int32(avail), 9, 149)
        K._step2d(S, nb, np.int32(27), np.int32(avail), 9)
        return K._ranges2d(S, nb, np.int64(K._RPOS), np.int64(K._RD + 5), nwb, R)

    @numba.njit
    def run(stage, reps, xi, n, h, w, nblocks, rate, S, O, R, dt, S0):
        budget = rate * 16; avail = budget - 19; nwb = (budget + 31) // 32
        lc = np.int32(27); av = np.int32(avail); nb = G
        acc = 0
        for _ in range(reps):
            if stage == 0:
                ntasks = nblocks // G
                for t in range(ntasks):
                    K._gather_s(xi, n, h, w, True, t * G, G, S, O[:16 * G])
            elif stage == 1:  # on the gathered float bits again (coefficients read as floats are subnormals: slow)
                S[:16 * G] = S0
                acc += K._front2d(S, nb, lc, av, 9, 149)
            elif stage == 7:  # the restore alone, subtracted from stage 1
                S[:16 * G] = S0
            elif stage == 2:
                K._step2d(S, nb, lc, av, 9)
            elif stage == 3:
                acc += K._ranges2d(S, nb, np.int64(K._RPOS), np.int64(K._RD + 5), nwb, R)
            elif stage == 4:
                K._pack2d_sparse(S, O, nb, nwb, R)
            elif stage == 5:
                K._pack2d(S, O, nb, nwb)
            elif stage == 6:
                K._store_words(O, dt, nb, nwb)
        return acc + S[7] + O[3]
    return prep, run


names = ["gather(all tasks)", "front", "step", "ranges", "pack sparse", "pack full", "store (L1)", "restore"]
for rate in rates:
    res = {}
    st = {}
    for mn, K in mods.items():
        prep, run = drivers(K)
        S = np.zeros(K._ROWS * K.G, np.int32); O = np.zeros(18 * K.G, np.int32); R = np.zeros(32, np.int64)
        dt = np.zeros(K.G * 8, np.uint32)
        S0 = np.zeros(16 * K.G, np.int32)
        pairs = prep(xi, flat.size, lay.height, lay.width, lay.nblocks, 37, rate, S, O, R, S0)
        st[mn] = (run, S, O, R, dt, pairs, S0)
        for s in range(8):
            run(s, 1, xi, flat.size, lay.height, lay.width, lay.nblocks, rate, S, O, R, dt, S0)
    for rd in range(ROUNDS):
        for mn in (list(mods) if rd % 2 == 0 else list(mods)[::-1]):
            run, S, O, R, dt, pairs, S0 = st[mn]
            for s in range(8):
                reps = 3 if s == 0 else REPS
                c = time.process_time()
                run(s, reps, xi, flat.size, lay.height, lay.width, lay.nblocks, rate, S, O, R, dt, S0)
                el = time.process_time() - c
                per = el / (reps * (lay.nblocks // mods[mn].G * mods[mn].G if s == 0 else mods[mn].G)) * 1e9
                res.setdefault((mn, s), []).append(per)
    for mn in mods:
        best = {s: min(res[(mn, s)]) for s in range(8)}
        best[1] -= best[7]
        print(f"{mn:12s} rate {rate:2d} pairs {st[mn][5]:3d}: " + "  ".join(f"{names[s]} {best[s]:.2f}" for s in range(7))
              + f"  | sum(gather..pack sparse+store) {best[0] + best[1] + best[2] + best[3] + best[4] + best[6]:.2f}")
print(f"load {os.getloadavg()}")
