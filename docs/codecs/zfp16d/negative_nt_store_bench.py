"""Word-store micro-benchmark: current _store_words (rate 16) vs non-temporal 64-bit stores, over a 4 MiB output."""
import sys, time, os, numpy as np, numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic
sys.path.insert(0, '/tmp/zfp16d')
import zfp_v1 as K
G = K.G

@intrinsic
def _stnt64(typingctx, arr, idx, val):
    sig = types.void(arr, idx, val)
    def codegen(context, builder, signature, args):
        a, i, v = args
        aty = signature.args[0]
        ary = context.make_array(aty)(context, builder, a)
        ptr = builder.gep(ary.data, [i])
        st = builder.store(v, ptr)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
    return sig, codegen

@numba.njit
def store_nt(O, dt64, nb):
    for j in range(nb):
        for k in range(4):
            lo = np.uint64(np.uint32(O[(2 * k) * G + j]))
            hi = np.uint64(np.uint32(O[(2 * k + 1) * G + j]))
            _stnt64(dt64, 4 * j + k, lo | (hi << np.uint64(32)))

@numba.njit
def run(mode, O, data, ntasks):
    d64 = data.view(np.uint64)
    for t in range(ntasks):
        if mode == 0:
            K._store_words(O, data[t * 8 * G:(t + 1) * 8 * G], G, 8)
        elif mode == 1:
            store_nt(O, d64[t * 4 * G:(t + 1) * 4 * G], G)
    return data[5]

O = np.random.default_rng(0).integers(0, 2**31, 18 * G).astype(np.int32)
ntasks = 1024
data = np.zeros(ntasks * 8 * G, np.uint32); d2 = np.zeros_like(data)
run(0, O, data, ntasks); run(1, O, d2, ntasks)
assert np.array_equal(data, d2)
res = {0: [], 1: []}
for rd in range(int(os.environ.get("ROUNDS", "41"))):
    for m in ((0, 1) if rd % 2 == 0 else (1, 0)):
        c = time.process_time(); run(m, O, data, ntasks); res[m].append(time.process_time() - c)
for m, nm in ((0, "_store_words"), (1, "nt 64-bit")):
    print(f"{nm:14s} {min(res[m]) / (ntasks * G) * 1e9:5.2f} ns CPU/block best, median {np.median(res[m]) / (ntasks * G) * 1e9:5.2f}")
print("load", os.getloadavg())
