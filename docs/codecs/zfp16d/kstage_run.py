"""ns CPU per block, cumulative stages, of a staged module (mkstage.py) on a tensor, single process."""
import sys, time, numpy as np, os, importlib
sys.path.insert(0, '/tmp/zfp16d')
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu; cpu.threading_layer()
x = np.load(sys.argv[1]); flat = x.reshape(-1); lay = zfp.layout_of(x.shape)
mods = sys.argv[2].split(",")
rates = [int(r) for r in sys.argv[3:]]
M = {m: importlib.import_module(m) for m in mods}
for rate in rates:
    data = np.empty(zfp.data_words(lay, rate), np.uint32); y = np.empty(flat.size, np.float32)
    a = (flat.size, lay.height, lay.width, lay.nblocks, True, rate, 26, 9, 149)
    res = {}
    fs = []
    for mn, mod in M.items():
        mod.encode(flat, *a, data)
        fs.append((mn, "enc", lambda s, mod=mod: mod.encode(flat, *a, data, s), ["gather", "+front", "+step", "+pack", "+store"]))
        fs.append((mn, "dec", lambda s, mod=mod: mod.decode(data, *a, y, s), ["words", "+head", "+extract", "+back", "+scatter"]))
    for mn, nm, f, labels in fs:
        for s in range(5): f(s)
    for rd in range(int(os.environ.get("ROUNDS", "9"))):
        for mn, nm, f, labels in (fs if rd % 2 == 0 else fs[::-1]):
            for s in range(5):
                c = time.process_time(); f(s); res.setdefault((mn, nm), {}).setdefault(s, []).append(time.process_time() - c)
    for mn, nm, f, labels in fs:
        r = res[(mn, nm)]
        cum = [min(r[s]) / lay.nblocks * 1e9 for s in range(5)]
        print(f"{mn:10s} rate {rate:2d} {nm}: " + "  ".join(f"{labels[s]} {cum[s] - (cum[s-1] if s else 0):+.1f}" for s in range(5)) + f"  = {cum[4]:.1f} ns CPU/block")
print(f"threads {os.environ.get('NUMBA_NUM_THREADS')} load {os.getloadavg()}")
