"""Gather micro-benchmark 3: current _gather_s vs a direct 8-block deinterleave through an LLVM IR intrinsic
(one <32 x i32> load per row and four shufflevectors) for maps with w % 32 == 0."""
import sys, time, os, numpy as np, numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic
sys.path.insert(0, '/tmp/zfp16d')
import zfp_v1 as K
G = K.G

@intrinsic
def _deint8(typingctx, src, so, dst, do):
    sig = types.void(src, types.intp, dst, types.intp)
    def codegen(context, builder, signature, args):
        sa = context.make_array(signature.args[0])(context, builder, args[0])
        da = context.make_array(signature.args[2])(context, builder, args[2])
        i32 = ir.IntType(32); v32 = ir.VectorType(i32, 32); v8 = ir.VectorType(i32, 8)
        sp = builder.bitcast(builder.gep(sa.data, [args[1]]), v32.as_pointer())
        v = builder.load(sp, align=4)
        for c in range(4):
            o = builder.shuffle_vector(v, v, ir.Constant(v8, [4 * q + c for q in range(8)]))
            dp = builder.gep(da.data, [builder.add(args[3], ir.Constant(args[3].type, c * G))])
            builder.store(o, builder.bitcast(dp, v8.as_pointer()), align=4)
        return context.get_dummy_value()
    return sig, codegen

@numba.njit
def gather8(xi, h, w, b0, nb, S):
    bc = w // 4
    br = (h + 3) // 4
    for k in range(nb // 8):
        b = b0 + 8 * k
        p = b // (br * bc)
        rem = b - p * br * bc
        by = rem // bc
        bx = rem - by * bc
        for r in range(4):
            xr = p * h * w + min(4 * by + r, h - 1) * w + 4 * bx
            _deint8(xi, xr, S, (4 * r) * G + 8 * k)

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
for m, nm in ((0, "_gather_s"), (1, "gather8 IR")):
    print(f"{nm:16s} {min(res[m]) / lay.nblocks * 1e9:5.2f} ns CPU/block best, median {np.median(res[m]) / lay.nblocks * 1e9:5.2f}")
print("load", os.getloadavg())
asm = next(iter(gather8.inspect_asm().values()))
import re
print("gather8 ymm", len(re.findall("ymm", asm)), "lines", len(asm.splitlines()))
open("/tmp/zfp16d/gather8.s", "w").write(asm)
