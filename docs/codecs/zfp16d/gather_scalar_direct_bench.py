"""Gather micro-benchmark 2: current _gather_s vs a direct 8-block deinterleave (no staging table) for maps with
w % 32 == 0 and h % 4 == 0, straight-line code for SLP vectorisation."""
import sys, time, os, numpy as np, numba
sys.path.insert(0, '/tmp/zfp16d')
import zfp_v1 as K
G = K.G
U = np.uint64

@numba.njit
def gather8(xi, h, w, b0, nb, S):
    bc = w // 4
    br = h // 4
    for k in range(nb // 8):
        b = b0 + 8 * k
        p = b // (br * bc)
        rem = b - p * br * bc
        by = rem // bc
        bx = rem - by * bc
        base = U(p * h * w + 4 * by * w + 4 * bx)
        j0 = U(8 * k)
        for r in range(4):
            xr = base + U(r * w)
            for c in range(4):
                o = U((4 * r + c) * G) + j0
                S[o + U(0)] = xi[xr + U(c)]
                S[o + U(1)] = xi[xr + U(4 + c)]
                S[o + U(2)] = xi[xr + U(8 + c)]
                S[o + U(3)] = xi[xr + U(12 + c)]
                S[o + U(4)] = xi[xr + U(16 + c)]
                S[o + U(5)] = xi[xr + U(20 + c)]
                S[o + U(6)] = xi[xr + U(24 + c)]
                S[o + U(7)] = xi[xr + U(28 + c)]

@numba.njit
def run(mode, xi, n, h, w, nblocks, S, S2, O):
    ntasks = nblocks // G
    bad = 0
    for t in range(ntasks):
        if mode == 0:
            K._gather_s(xi, n, h, w, True, t * G, G, S, O[:16 * G])
        elif mode == 1:
            gather8(xi, h, w, t * G, G, S)
        else:
            K._gather_s(xi, n, h, w, True, t * G, G, S, O[:16 * G])
            gather8(xi, h, w, t * G, G, S2)
            for i in range(16 * G):
                bad += S[i] != S2[i]
    return bad

x = np.load(sys.argv[1]); flat = x.reshape(-1); xi = flat.view(np.int32)
import onnxcomp.custom_ops.zfp as zfp
lay = zfp.layout_of(x.shape)
S = np.zeros(K._ROWS * G, np.int32); S2 = S.copy(); O = np.zeros(18 * G, np.int32)
args = (xi, flat.size, lay.height, lay.width, lay.nblocks, S, S2, O)
print("mismatches", run(2, *args))
res = {0: [], 1: []}
for rd in range(int(os.environ.get("ROUNDS", "31"))):
    for m in ((0, 1) if rd % 2 == 0 else (1, 0)):
        c = time.process_time(); run(m, *args); res[m].append(time.process_time() - c)
for m, nm in ((0, "_gather_s"), (1, "gather8 direct")):
    print(f"{nm:16s} {min(res[m]) / lay.nblocks * 1e9:5.2f} ns CPU/block best, median {np.median(res[m]) / lay.nblocks * 1e9:5.2f}")
print("load", os.getloadavg())
asm = next(iter(gather8.inspect_asm().values()))
import re
print("gather8 ymm", len(re.findall("ymm", asm)), "xmm", len(re.findall("xmm", asm)), "lines", len(asm.splitlines()))
