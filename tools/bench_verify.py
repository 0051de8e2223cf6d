"""Cost of the op-layer payload frame and of --verify-payloads' xxh3 checksum, beside the codecs' own time.

    python tools/bench_verify.py [--shape 32 64 32 32] [--repeats 7]

Per codec: median seconds of encode + decode (codec only), of framing + header check, and of framing +
checksum + verify, on one ReLU-like float32 activation (sparse, like a stashed activation). Interleaved
repeats, medians: the machine may be loaded.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from onnxcomp.custom_ops import get_codec
from onnxcomp.runtime import framing


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs="+", default=[32, 64, 32, 32])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--codecs", nargs="+", default=["signbits", "zvc", "sparse", "sz", "dpr_fp16"])
    args = ap.parse_args()
    x = np.maximum(np.random.default_rng(0).standard_normal(args.shape), 0).astype(np.float32)
    print(f"tensor {tuple(args.shape)} float32, {x.nbytes / 2**20:.1f} MiB, ReLU-like (~50% zeros)")
    print("| codec | payload MiB | codec encode+decode ms | + frame/header check ms | + xxh3 checksum/verify ms "
          "| checksum cost vs codec |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.codecs:
        codec = get_codec(name)
        params = {"eb": 1e-3} if name == "sz" else {}
        t_codec, t_head, t_sum = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            payload = tuple(np.ascontiguousarray(p) for p in codec.encode_cpu(x, **params))
            codec.decode_cpu(payload, **params)
            t1 = time.perf_counter()
            framing.unframe(codec, framing.frame(codec, payload, checksum=False))
            t2 = time.perf_counter()
            framing.unframe(codec, framing.frame(codec, payload, checksum=True))
            t3 = time.perf_counter()
            t_codec.append(t1 - t0), t_head.append(t2 - t1), t_sum.append(t3 - t2)
        mc, mh, ms = (statistics.median(t) * 1e3 for t in (t_codec, t_head, t_sum))
        nbytes = sum(p.nbytes for p in payload) / 2**20
        print(f"| {name} | {nbytes:.2f} | {mc:.2f} | {mh:.3f} | {ms:.3f} | {100 * ms / mc:.1f} % |")


if __name__ == "__main__":
    main()
