"""Single-thread stage profile of the tree's encoder pieces (ns CPU per block), rate 8, stem tensor."""
import sys, time, re, numpy as np, numba
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import _zfp_numba as m
G = m.G
@numba.njit
def run(x, n, h, w, nblocks, two_d, rate, stage, data):
    budget = rate * 16; avail = budget - 19; lc = np.int32(27); av = np.int32(avail)
    xi = x.view(np.int32); nwb = (budget + 31) // 32; task_words = G * budget // 32
    S = np.empty(m._ROWS * G, np.int32)
    O = np.empty(18 * G, np.int32)
    T = np.empty(16 * G, np.int32)
    acc = 0
    for t in range((nblocks + G - 1) // G):
        b0 = t * G; nb = min(nblocks, b0 + G) - b0
        m._gather_s(xi, n, h, w, two_d, b0, nb, S, T)
        if stage >= 1:
            m._front2d(S, nb, lc, av, 9, 149)
        if stage >= 2:
            m._step2d(S, nb, lc, av, 9)
        if stage >= 3:
            m._pack2d(S, O, nb, nwb)
        if stage >= 4:
            w0 = t * task_words
            m._store_words(O, data[w0:w0 + task_words], nb, nwb)
        acc += S[5 * G + 3]
    return acc
@numba.njit
def fa(S, nb): m._front2d(S, nb, np.int32(27), np.int32(109), 9, 149)
@numba.njit
def fb(S, nb): m._step2d(S, nb, np.int32(27), np.int32(109), 9)
@numba.njit
def fp(S, nb): m._pack2d(S, S[:18*G].copy(), nb, 4)
@numba.njit
def fg(xi, S, nb): m._gather_s(xi, xi.size, 32, 32, True, 0, nb, S, S[:16*G].copy())
S = np.zeros(m._ROWS * G, np.int32)
for f in (fa, fb, fp):
    f(S, 100); asm = f.inspect_asm(f.signatures[0]); print(f.__name__, "ymm", len(re.findall("ymm", asm)), "lines", asm.count("\n"))
x = np.load(sys.argv[1]); flat = x.reshape(-1); lay = zfp.layout_of(x.shape)
fg(flat.view(np.int32), S, 100); asm = fg.inspect_asm(fg.signatures[0]); print("gather ymm", len(re.findall("ymm", asm)), "xmm", len(re.findall("xmm", asm)))
open("/tmp/zfpfast/gather.s", "w").write(asm)
data = np.empty(zfp.data_words(lay, 8), np.uint32)
res = {}
NS = 5
for s in range(NS): run(flat, flat.size, lay.height, lay.width, lay.nblocks, True, 8, s, data)
for r in range(7):
    for s in range(NS):
        c = time.process_time(); run(flat, flat.size, lay.height, lay.width, lay.nblocks, True, 8, s, data); res.setdefault(s, []).append(time.process_time() - c)
for s, v in res.items():
    print(["gather", "+frontA", "+step", "+pack", "+store"][s], f"{min(v) / lay.nblocks * 1e9:.1f} ns/block")
asm = fa.inspect_asm(fa.signatures[0]); open("/tmp/zfpfast/fa.s", "w").write(asm)
asm = fb.inspect_asm(fb.signatures[0]); open("/tmp/zfpfast/fb.s", "w").write(asm)
