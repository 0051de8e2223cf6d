"""Gather micro-benchmark: variants of the per-task gather over every task of a tensor, single thread."""
import sys, time, os, numpy as np, numba
sys.path.insert(0, '/tmp/zfp16d')
import zfp_v1 as zk
from zfp_v1 import G, _gather_s

@numba.njit(cache=True)
def run_gather(xi, n, h, w, nblocks, mode):
    S = np.empty(zk._ROWS * G, np.int32); O = np.empty(18 * G, np.int32); T = O[:16 * G]
    ntasks = (nblocks + G - 1) // G
    acc = 0
    for t in range(ntasks):
        b0 = t * G; nb = min(nblocks, b0 + G) - b0
        if mode == 0:
            _gather_s(xi, n, h, w, True, b0, nb, S, T)
        elif mode == 1:  # deinterleave pass only
            for r in range(4):
                Tr = T[r * 4 * G:(r + 1) * 4 * G]
                Sr = S[4 * r * G:]
                for j in range(nb):
                    Sr[0 * G + j] = Tr[4 * j]
                    Sr[1 * G + j] = Tr[4 * j + 1]
                    Sr[2 * G + j] = Tr[4 * j + 2]
                    Sr[3 * G + j] = Tr[4 * j + 3]
        elif mode == 2:  # one contiguous copy of the task's 16*nb values into T (memory floor-ish)
            xv = xi[16 * b0:16 * (b0 + nb)]
            for e in range(16 * nb):
                T[e] = xv[e]
        elif mode == 3:  # pure streaming read
            xv = xi[16 * b0:16 * (b0 + nb)]
            m = np.int32(0)
            for e in range(16 * nb):
                m = np.int32(m | xv[e])
            acc += m
        acc += S[5] + T[7]
    return acc

x = np.load(sys.argv[1]).reshape(-1); xi = x.view(np.int32)
import onnxcomp.custom_ops.zfp as zfp
lay = zfp.layout_of(np.load(sys.argv[1]).shape)
args = (xi, x.size, lay.height, lay.width, lay.nblocks)
for m in range(4): run_gather(*args, m)
res = {m: [] for m in range(4)}
for rd in range(int(os.environ.get("ROUNDS", "21"))):
    for m in (range(4) if rd % 2 == 0 else reversed(range(4))):
        c = time.process_time(); run_gather(*args, m); res[m].append(time.process_time() - c)
for m, nm in enumerate(["gather", "deinterleave only", "contig copy", "stream read"]):
    print(f"{nm:20s} {min(res[m]) / lay.nblocks * 1e9:5.2f} ns CPU/block")
print("load", os.getloadavg())
