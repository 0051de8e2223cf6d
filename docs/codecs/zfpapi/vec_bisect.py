import sys, importlib, numpy as np
src = open('/tmp/zfpapi/bis/base.py').read().replace("cache=True", "cache=False")
import os
if os.environ.get("INL"):
    for n in ["_bitlen28", "_lift", "_block_scale", "_q"]:
        src = src.replace(f"@numba.njit(cache=False)\ndef {n}(", f"@numba.njit(cache=False, inline=\"always\")\ndef {n}(")
variants = {
 "base": [],
 "spec32": [("        spec |= _I32(a >= _I32(0x7F800000))\n", "        spec = _I32(spec | _I32(a >= _I32(0x7F800000)))\n")],
 "specmax": [("        spec |= _I32(a >= _I32(0x7F800000))\n", "        spec = max(spec, a)\n")],
 "nospec": [("        spec |= _I32(a >= _I32(0x7F800000))\n", "")],
 "noq": [("def _q(bits, s1, s2):\n    return _I32(_F32(_F32(np.int32(bits).view(np.float32) * s1) * s2))", "def _q(bits, s1, s2):\n    return bits")],
 "nobl": [("m0, m1, m2, m3, m4 = _bitlen28(_I32(o0)), _bitlen28(_I32(o1)), _bitlen28(_I32(o2)), _bitlen28(_I32(o3)), \\\n            _bitlen28(_I32(o4))", "m0, m1, m2, m3, m4 = o0, o1, o2, o3, o4")],
 "noscale": [("        a = _I32(max(a, max(max(max(b8 & mk, b9 & mk), max(b10 & mk, b11 & mk)),\n                            max(max(b12 & mk, b13 & mk), max(b14 & mk, b15 & mk)))))\n        emax, s1, s2 = _block_scale(a)", "        a = _I32(max(a, max(max(max(b8 & mk, b9 & mk), max(b10 & mk, b11 & mk)),\n                            max(max(b12 & mk, b13 & mk), max(b14 & mk, b15 & mk)))))\n        emax, s1, s2 = a, _F32(1.0), _F32(2.0)")],
 "nolift": [("def _lift(x, y, z, w):\n", "def _lift(x, y, z, w):\n    return x, y, z, w\n")],
}
sel = sys.argv[1:] or list(variants)
for name in sel:
    s = src
    for a, b in variants[name]:
        assert s.count(a) == 1, (name, a[:40])
        s = s.replace(a, b)
    open(f'/tmp/zfpapi/bis/m_{name}{os.environ.get("INL","")}.py', 'w').write(s)
    sys.path.insert(0, '/tmp/zfpapi/bis')
    m = importlib.import_module(f"m_{name}{os.environ.get('INL','')}")
    S = np.zeros(m._ROWS * m.G, np.int32)
    m._front2d(S, 100, np.int32(27), np.int32(109), 9, 149)
    f = m._front2d; sg = f.signatures[0]
    asm = f.inspect_asm(sg); ir = f.inspect_llvm(sg)
    print(f"{name:10s} ymm {asm.count('%ymm'):5d} <8 x {ir.count('<8 x'):5d} slt {ir.count('icmp slt i64')}", flush=True)
