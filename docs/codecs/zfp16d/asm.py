"""Compile _front2d alone (fresh, no cache) from a module file and count ymm / vector ops in its asm."""
import re, sys, importlib
import numpy as np
sys.path.insert(0, '/tmp/zfp16d')
K = importlib.import_module(sys.argv[1])
S = np.zeros(K._ROWS * K.G, np.int32)
for nm in sys.argv[2:]:
    f = getattr(K, nm)
    if nm == "_front2d": f(S, 128, np.int32(27), np.int32(247), 9, 149, *( [np.zeros_like(S)] if sys.argv[1]=="zfp_v5" else []))
    if nm == "_step2d": f(S, 128, np.int32(27), np.int32(247), 9)
    for sig, asm in f.inspect_asm().items():
        open(f"/tmp/zfp16d/asm_{sys.argv[1]}_{nm}.s", "w").write(asm)
        print(nm, "lines", len(asm.splitlines()), "ymm", len(re.findall(r"%ymm", asm)), "vcvtsi2ss", asm.count("vcvtsi2ss"), "vpsllvd", asm.count("vpsllvd"), "vpsravd", asm.count("vpsravd"))
