import sys, time, numpy as np, os
sys.path.insert(0, '/tmp/zfpapi')
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import cpu; cpu.threading_layer()
mod = __import__(sys.argv[2])
x = np.load(sys.argv[1]); flat = x.reshape(-1); lay = zfp.layout_of(x.shape)
for rate in [int(r) for r in sys.argv[3:]]:
    data = np.empty(zfp.data_words(lay, rate), np.uint32); y = np.empty(flat.size, np.float32)
    a = (flat.size, lay.height, lay.width, lay.nblocks, True, rate, 26, 9, 149)
    mod.encode(flat, *a, data)
    for nm, f, labels in (("enc", lambda s: mod.encode(flat, *a, data, s), ["gather", "+front", "+step", "+pack", "+store"]),
                          ("dec", lambda s: mod.decode(data, *a, y, s), ["words", "+head", "+extract", "+back", "+scatter"])):
        res = {}
        for s in range(5): f(s)
        for _ in range(9):
            for s in range(5):
                c = time.process_time(); f(s); res.setdefault(s, []).append(time.process_time() - c)
        print(f"rate {rate:2d} {nm}: " + "  ".join(f"{labels[s]} {min(v) / lay.nblocks * 1e9:.1f}" for s, v in res.items()) + " ns CPU/block")
print(f"threads {os.environ.get('NUMBA_NUM_THREADS')} load {os.getloadavg()}")
