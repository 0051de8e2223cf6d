"""Single-thread stage profile of the tree's decoder pieces (ns CPU per block), rate 8, stem tensor."""
import sys, time, re, numpy as np, numba
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import _zfp_numba as m
G = m.G
@numba.njit
def run(data, n, h, w, nblocks, two_d, rate, stage, y):
    budget = rate * 16; avail = budget - 19; lc = np.int32(27); av = np.int32(avail)
    nwb = (budget + 31) // 32; task_words = G * budget // 32
    S = np.empty(m._DROWS * G, np.int32); W = np.empty((nwb + 4) * G, np.int32); T = np.empty(16 * G, np.int32)
    yi = y.view(np.int32)
    acc = 0
    for t in range((nblocks + G - 1) // G):
        b0 = t * G; nb = min(nblocks, b0 + G) - b0
        w0 = t * task_words; wend = min(w0 + task_words, data.size)
        m._load_words(data, w0, wend, budget, nb, nwb, W)
        if stage >= 1:
            m._dec_head(S, W, nb, True, lc, av, 9, 149)
        if stage >= 2:
            m._extract2d(S, W, nb, nwb, 9)
        if stage >= 3:
            m._back2d(S, nb)
        if stage >= 4:
            m._scatter_s(yi, n, h, w, True, b0, nb, S, T)
        acc += S[5 * G + 3] + W[7]
    return acc
x = np.load(sys.argv[1]); flat = x.reshape(-1); lay = zfp.layout_of(x.shape)
data = np.empty(zfp.data_words(lay, 8), np.uint32)
m.encode(flat, flat.size, lay.height, lay.width, lay.nblocks, True, 8, 26, 9, 149, data)
y = np.empty(flat.size, np.float32)
res = {}
NS = 5
for s in range(NS): run(data, flat.size, lay.height, lay.width, lay.nblocks, True, 8, s, y)
for r in range(7):
    for s in range(NS):
        c = time.process_time(); run(data, flat.size, lay.height, lay.width, lay.nblocks, True, 8, s, y); res.setdefault(s, []).append(time.process_time() - c)
for s, v in res.items():
    print(["words", "+head", "+extract", "+back", "+scatter"][s], f"{min(v) / lay.nblocks * 1e9:.1f} ns/block")
for name in ("_dec_head", "_extract2d", "_back2d", "_scatter_s", "_load_words"):
    pass
asm = run.inspect_asm(run.signatures[0]); open("/tmp/zfpfast/drun.s", "w").write(asm)
print("ymm", len(re.findall("ymm", asm)))
