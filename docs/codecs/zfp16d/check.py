"""Byte-equality of the tree's numba encoder/decoder vs main's (zfp16d: main 6d90629) on real activations + synthetic cases
(words into a buffer pre-filled with 0xDEADBEEF; decoded bits compared)."""
import sys, glob, os, numpy as np
import onnxcomp.custom_ops.zfp as zfp
from onnxcomp.custom_ops import _zfp_numba as new
sys.path.insert(0, "/tmp/zfp16d"); import zfp_main_kernels as old

def enc(mod, x, rate, fill=None):
    lay = zfp.layout_of(x.shape); flat = np.ascontiguousarray(x).reshape(-1)
    flat = np.where(np.isfinite(flat), flat, np.float32(0))
    words = np.full(zfp.data_words(lay, rate), 0 if fill is None else fill, dtype=np.uint32)
    mod.encode(flat, flat.size, lay.height, lay.width, lay.nblocks, lay.two_d, rate, 26, 9, 149, words)
    return words
def dec(mod, words, shape, rate):
    lay = zfp.layout_of(shape); n = int(np.prod(shape)); y = np.empty(n, np.float32)
    ok = mod.decode(words, n, lay.height, lay.width, lay.nblocks, lay.two_d, rate, 26, 9, 149, y)
    return ok, y
rng = np.random.default_rng(1)
cases = []
for f in sorted(glob.glob("/tmp/codecthru/acts/*.npy")):
    cases.append((os.path.basename(f), np.load(f)))
sp = np.array([0.0, -0.0, 1e-45, -1e-45, 3.0, 3e38, -3e38, 1.17e-38, 5e-39, -2e-40], np.float32)
cases += [("special", sp), ("tiny", (rng.standard_normal((3, 5, 9, 13)) * 1e-40).astype(np.float32)),
          ("mixed", (rng.standard_normal((2, 3, 17, 9)) * np.exp(rng.standard_normal((2, 3, 17, 9)) * 20)).astype(np.float32)),
          ("mixedbig", (rng.standard_normal((4, 8, 64, 64)) * np.exp(rng.standard_normal((4, 8, 64, 64)) * 3)).astype(np.float32)),
          ("smooth", np.cumsum(np.cumsum(rng.standard_normal((8, 64, 64)), 1), 2).astype(np.float32)),
          ("blockmix", (rng.standard_normal((8, 64, 64)) * np.repeat(np.repeat(
              np.exp(rng.standard_normal((8, 16, 16)) * 4) * (rng.random((8, 16, 16)) < 0.7), 4, 1), 4, 2)).astype(np.float32)),
          ("odd", rng.standard_normal((3, 33)).astype(np.float32) * 100), ("1d", rng.standard_normal(100001).astype(np.float32)),
          ("zeros", np.zeros((4, 9), np.float32)), ("big", (rng.standard_normal((5, 7, 7)) * 1e37).astype(np.float32)),
          ("sub_and_big", np.array([[1e-45, 3e38, 0, 1], [2, 3, -1e-40, 5]], np.float32)),
          ("w1", rng.standard_normal((5, 1, 7, 1, 3)).astype(np.float32))]
# zfp16d: widths that take the direct gather (w % 16 == 0: 4- and 8-block rows), heights that are not multiples of 4
# (clamped rows), partial last tasks; and a width just off it
cases += [(f"w16path_{'x'.join(map(str, sh))}", (rng.standard_normal(sh) * np.exp(rng.standard_normal(sh) * 2)).astype(np.float32))
          for sh in [(2, 3, 18, 32), (1, 5, 7, 48), (3, 2, 13, 16), (2, 1, 30, 80), (1, 1, 4, 16), (7, 3, 16, 64), (2, 2, 9, 36)]]
bad = 0; n = 0
for name, x in cases:
    for rate in ([4, 8, 12, 16] if x.size > 100000 else [3, 4, 5, 7, 8, 12, 13, 16, 24, 32]):
        a = enc(old, x, rate); b = enc(new, x, rate, fill=0xDEADBEEF); n += 1
        if not np.array_equal(a, b):
            bad += 1; d = np.flatnonzero(a != b); print("ENC MISMATCH", name, x.shape, rate, d[:5], a[d[:3]], b[d[:3]])
            continue
        oka, ya = dec(old, a, x.shape, rate); okb, yb = dec(new, a, x.shape, rate)
        if oka != okb or not np.array_equal(ya.view(np.uint32), yb.view(np.uint32)):
            bad += 1; print("DEC MISMATCH", name, x.shape, rate)
    # corrupted words: both decoders must agree on the flag (and on the values where it is True)
    if x.size > 1000:
        w = enc(old, x, 8); w ^= rng.integers(0, 2**32, w.size, dtype=np.uint32) & np.uint32(0x00FF00FF)
        oka, ya = dec(old, w, x.shape, 8); okb, yb = dec(new, w, x.shape, 8); n += 1
        if oka != okb or (oka and not np.array_equal(ya.view(np.uint32), yb.view(np.uint32))):
            bad += 1; print("CORRUPT MISMATCH", name, oka, okb)
print("cases", len(cases), "checks", n, "mismatches", bad)
