"""Dump asm of named stage functions (after a warm-up that compiles them) to /tmp/zfp16/asm_<name>.s"""
import re, sys
import numpy as np
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu; cpu.threading_layer()
Z = zfp.ZFP(); x = np.load('/tmp/zfp16/stem.npy')
for r in (16,): Z.decode(Z.encode(x, rate=r))
from onnxcomp.custom_ops import _zfp_numba as K
for nm in sys.argv[1:]:
    f = getattr(K, nm)
    for sig, asm in f.inspect_asm().items():
        open(f"/tmp/zfp16/asm_{nm}.s", "w").write(asm)
        ymm = len(re.findall(r"%ymm", asm))
        print(nm, sig, "lines", len(asm.splitlines()), "ymm", ymm)
