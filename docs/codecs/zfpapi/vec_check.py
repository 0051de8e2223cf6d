import sys, numpy as np
sys.path.insert(0, '/tmp/zfpapi/bis')
src = open('/tmp/zfpapi/bis/base.py').read().replace("cache=True", "cache=False")
open('/tmp/zfpapi/bis/m_chk.py', 'w').write(src)
import m_chk as m
S = np.zeros(m._ROWS * m.G, np.int32); W = np.zeros(12 * m.G, np.int32)
m._front2d(S, 100, np.int32(27), np.int32(109), 9, 149)
m._front1d(S, 100, np.int32(27), np.int32(109), 9, 149)
m._dec_head2d(S, W, 100, np.int32(27), np.int32(109), 9, 149)
m._dec_head1d(S, W, 100, np.int32(27), np.int32(29), 9, 149)
for nm in ("_front2d", "_front1d", "_dec_head2d", "_dec_head1d"):
    f = getattr(m, nm); sg = f.signatures[0]; asm = f.inspect_asm(sg); ir = f.inspect_llvm(sg)
    print(f"{nm:12s} ymm {asm.count('%ymm'):5d} <8 x {ir.count('<8 x'):5d} slt {ir.count('icmp slt i64')}", flush=True)
