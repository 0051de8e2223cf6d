"""A/B of the sz numba kernels: this checkout's against a git revision's, interleaved in one process, process CPU
time (all threads) as a fraction of a 64 MiB np.copyto's in the same run; asserts identical bytes first.

    flock /tmp/onnxcomp-timing.lock .venv/bin/python docs/codecs/zfpv3/ab_sz_kernels.py \\
        --tensor /tmp/zfpv3/acts/resnet18_64px_b32_relu_relu_out.npy --base 7926f2b --repeat 9
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from onnxcomp.custom_ops import cpu

cpu.threading_layer()
from onnxcomp.custom_ops.cpu import sz as new  # noqa: E402


def load_base(rev: str) -> object:
    src = subprocess.run(["git", "show", f"{rev}:custom_ops/cpu/sz.py"], check=True, capture_output=True,
                         text=True).stdout.replace("from .._zfp_numba import", "from onnxcomp.custom_ops._zfp_numba import")
    path = Path(tempfile.mkdtemp()) / "sz_base.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("sz_base", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sz_base"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensor", type=Path, required=True)
    ap.add_argument("--base", default="7926f2b")
    ap.add_argument("--rel", type=float, default=1e-2)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    old = load_base(args.base)
    x = np.load(args.tensor).astype(np.float32).reshape(-1)
    eb = args.rel * float(x.max() - x.min())
    rates, data, idx = new.encode_blocks(x, eb)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(old.encode_blocks(x, eb), (rates, data, idx)))
    assert old.decode_blocks(rates, data, x.size, eb).tobytes() == new.decode_blocks(rates, data, x.size, eb).tobytes()
    src = np.random.default_rng(0).random(16 << 20, dtype=np.float32)
    dst = np.empty_like(src)
    fns = {"copy 64 MiB": lambda: np.copyto(dst, src),
           f"encode {args.base}": lambda: old.encode_blocks(x, eb), "encode this": lambda: new.encode_blocks(x, eb),
           f"decode {args.base}": lambda: old.decode_blocks(rates, data, x.size, eb),
           "decode this": lambda: new.decode_blocks(rates, data, x.size, eb)}
    cpu_s: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.repeat):
        for k, f in fns.items():
            c = time.process_time()
            f()
            cpu_s[k].append(time.process_time() - c)
    copy = src.nbytes / min(cpu_s["copy 64 MiB"])
    print(f"tensor {args.tensor.name} {x.nbytes} bytes, eb {eb:.3g}")
    for k, ts in cpu_s.items():
        nbytes = src.nbytes if k.startswith("copy") else x.nbytes
        best, med = nbytes / min(ts), nbytes / float(np.median(ts))
        print(f"{k:18s} best {best / 1e6:6.0f} MB per CPU s ({best / copy:.3f} x copy), median {med / 1e6:6.0f} "
              f"({med / copy:.3f})")


if __name__ == "__main__":
    main()
