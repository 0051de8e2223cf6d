"""NumPy vs numba throughput per codec and direction at stash-sized synthetic activations (1-16 MiB float32).

The figures behind ``custom_ops/cpu.AOT_BY_DEFAULT`` (which codecs default to compiled kernels): standard-normal NCHW
tensors (64 channels, 32x32) as ReLU inputs, their ReLU as outputs (50 % zeros) and a 90 %-zero variant (where
``sparse`` picks CSR), the 3x3/2 MaxPool indices of the ReLU output, ``intervalmask`` at ReLU6's [0, 6].
Prints one Markdown row per (codec, size): best MB/s of ``--repeat`` runs per backend and NumPy / numba (above
1: NumPy is faster). Time it under the shared lock: ``flock /tmp/onnxcomp-timing.lock python tools/...``.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_codecs import bench_codec, maxpool_indices  # noqa: E402

from onnxcomp.custom_ops import cpu  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16], help="tensor sizes in MiB")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if not cpu.numba_available():
        raise SystemExit("bench_codec_backends: numba is not installed; pip install numba")
    with cpu.use_backend("numba"):
        cpu.warm_up()  # load every kernel before timing
    rng = np.random.default_rng(0)
    print("| codec | input | MiB | encode MB/s numpy / numba (ratio) | decode MB/s numpy / numba (ratio) | same bytes |")
    print("|---|---|---:|---:|---:|:-:|")
    for mib in args.sizes:
        x = rng.standard_normal(((mib << 18) // (64 * 32 * 32), 64, 32, 32), dtype=np.float32)
        relu = np.maximum(x, 0)
        sparse90 = np.where(x > 1.2816, x, 0).astype(np.float32)
        idx, mp = maxpool_indices(relu)
        cases = [(n, "relu in", x, {}) for n in ("signbits", "relumask", "dpr_fp16", "dpr_bf16", "dpr_fp8")]
        cases += [(n, "relu out", relu, {}) for n in ("zvc", "csr", "sparse")]
        cases += [(n, "90 % zeros", sparse90, {}) for n in ("csr", "sparse")]
        cases += [("sz", "relu out, eb 1 % of range", relu, {"eb": 1e-2 * float(relu.max())}),
                  ("maxpool_index", "3x3/2 indices of relu out", idx, mp),
                  ("intervalmask", "4x relu in, [0, 6]", 4 * x, {"lo": 0.0, "hi": 6.0})]
        for name, what, t, params in cases:
            r = bench_codec(name, t, params, args.repeat)
            a, b = r["numpy"], r["numba"]
            print(f"| {name} | {what} | {mib} | {a['encode_best']:.0f} / {b['encode_best']:.0f} "
                  f"({a['encode_best'] / b['encode_best']:.2f}) | {a['decode_best']:.0f} / {b['decode_best']:.0f} "
                  f"({a['decode_best'] / b['decode_best']:.2f}) | {'yes' if r['same_bytes'] else '**NO**'} |",
                  flush=True)
    print(f"\nload average {os.getloadavg()}, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
