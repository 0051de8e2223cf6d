import sys, time, resource, numpy as np
from onnxcomp.custom_ops import _zfp_numba as m
S = np.zeros(m._ROWS * m.G, np.int32)
c = time.process_time()
m._front2d(S, 100, np.int32(27), np.int32(109), 9, 149)
print(f"front2d compile {time.process_time() - c:.1f} s CPU")
asm = m._front2d.inspect_asm(m._front2d.signatures[0])
print("ymm", asm.count("%ymm"), "xmm", asm.count("%xmm"), "cvtsi2ss", asm.count("cvtsi2ss"))
for nm in ("_bitlen28", "_block_scale", "_q", "_lift"):
    print(nm, getattr(m, nm).signatures)
import re
open('/tmp/zfpapi/front.s','w').write(asm)
print(m._front2d.inspect_llvm(m._front2d.signatures[0]).count("sitofp i64"))
ir = m._front2d.inspect_llvm(m._front2d.signatures[0])
open('/tmp/zfpapi/front.ll','w').write(ir)
