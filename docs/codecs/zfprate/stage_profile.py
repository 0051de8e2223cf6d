"""Single-thread stage profile of the v3 numba encoder: uncached copies of custom_ops/_zfp_numba.py with stages
cut out (their output is wrong; only the time matters), plus the real decoder and a copy of the same bytes.
Run: NUMBA_NUM_THREADS=1 PYTHONPATH=$PWD python docs/codecs/zfprate/stage_profile.py TENSOR.npy"""
import importlib.util, sys, time, os, numpy as np
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
src = (ROOT / "custom_ops" / "_zfp_numba.py").read_text()
variants = {
  "full": src,
  "no_pack": src.replace("        _pack(q, perm, gof, size, hdr, hcode, sj, uj, Dt, pos, vals, out, nb, nwb)", ""),
  "no_pack2": src.replace("        for k in range(lo >> 5, min((hi >> 5) + 2, nwb + 1)):", "        for k in range(0):"),
  "no_hdr_pack": src.replace("        _header(gm, amax, emax, exp_bias, exp_bits, lcap, gs, ng, avail, Dt, hcode, sj, uj, nb)", "").replace("        _pack(q, perm, gof, size, hdr, hcode, sj, uj, Dt, pos, vals, out, nb, nwb)", ""),
}
dec_src = src
x = np.load(sys.argv[1]); flat = x.reshape(-1)
import onnxcomp.custom_ops.zfp as zfp
lay = zfp.layout_of(x.shape)
rate = 8
nw = zfp.data_words(lay, rate)
mods = {}
for k, s in variants.items():
    fn = f"/tmp/zfp_stage_{k}.py"
    open(fn, "w").write(s)
    spec = importlib.util.spec_from_file_location(f"prof_{k}", fn)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    mods[k] = m
nblk = lay.nblocks
res = {}
words = np.zeros(nw, np.uint32)
for k, m in mods.items():
    m.encode(flat, flat.size, lay.height, lay.width, nblk, lay.two_d, rate, 26, 9, 149, words)
y = np.empty(flat.size, np.float32)
mods["full"].decode(words, flat.size, lay.height, lay.width, nblk, lay.two_d, rate, 26, 9, 149, y)
src_ = np.random.default_rng(0).random(x.size, dtype=np.float32); dst = np.empty_like(src_)
for r in range(9):
    for k, m in mods.items():
        words = np.zeros(nw, np.uint32)
        c = time.process_time()
        m.encode(flat, flat.size, lay.height, lay.width, nblk, lay.two_d, rate, 26, 9, 149, words)
        res.setdefault(k, []).append(time.process_time() - c)
        if k == "full":
            full_words = words  # decode the real stream (the cut variants write garbage)
    c = time.process_time(); mods["full"].decode(full_words, flat.size, lay.height, lay.width, nblk, lay.two_d, rate, 26, 9, 149, y); res.setdefault("decode", []).append(time.process_time() - c)
    c = time.process_time(); np.copyto(dst, src_); res.setdefault("copy", []).append(time.process_time() - c)
for k, v in res.items():
    print(f"{k:12s} {min(v) / nblk * 1e9:7.1f} ns/block (16 values)")
