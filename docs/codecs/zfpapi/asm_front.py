import re, sys, numpy as np, os
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu; cpu.threading_layer()
from onnxcomp.custom_ops import _zfp_numba as m
x = np.load('/tmp/zfpapi/stem.npy'); flat = x.reshape(-1); lay = zfp.layout_of(x.shape)
data = np.empty(zfp.data_words(lay, 8), np.uint32)
m.encode(flat, flat.size, lay.height, lay.width, lay.nblocks, True, 8, 26, 9, 149, data)
y = np.empty(flat.size, np.float32); m.decode(data, flat.size, lay.height, lay.width, lay.nblocks, True, 8, 26, 9, 149, y)
out = sys.argv[1]
for nm in sys.argv[2:]:
    f = getattr(m, nm)
    for sig in f.signatures:
        asm = f.inspect_asm(sig)
        open(f"{out}/{nm}.s", "w").write(asm)
        ins = [l.split()[0] for l in asm.splitlines() if l.startswith("\t") and not l.strip().startswith(".")]
        calls = [l for l in asm.splitlines() if "\tcall" in l]
        print(f"{nm}: {len(ins)} instr, ymm {asm.count('%ymm')}, xmm {asm.count('%xmm')}, cvtsi2ss {asm.count('cvtsi2ss')}, calls {len(calls)} {[c.split()[-1][:60] for c in calls][:5]}")
