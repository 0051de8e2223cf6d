"""Throughput of every codec's CUDA kernels, both directions, against the GPU's own copy bandwidth.

For each codec and each input (synthetic ReLU-like tensors from 1 MiB to 1 GiB, and real activations dumped on
the CPU with tools/dump_activations.py), it times encode and decode end to end (the codec's public
``encode``/``decode`` on CuPy arrays: kernels, scans and the host syncs the codec needs), with CUDA events,
median of ``--reps`` runs after warm-up, rotating among input copies so that small inputs never run from L2.

Conventions (stated in every output):

* ``GB/s``      = uncompressed bytes / time, 1 GB = 1e9 bytes: the tensor read by encode, the tensor written by
  decode (relumask decodes to one byte per element).
* ``copy GB/s`` = a device-to-device copy of the same size (``cudaMemcpyAsync``), counting bytes read **plus**
  bytes written (2 x size / time), i.e. the memory system's achievable rate.
* ``of copy``   = GB/s / copy GB/s. A codec reading its tensor once at the copy's rate scores 1.0 (a plain copy
  of the tensor itself scores 0.5: it must also write every byte).
* ``ratio``     = uncompressed bytes / payload bytes.

References in the same table: CuPy's own ops doing the nearest job (``x > 0`` + ``cupy.packbits``, ``astype``
to float16, boolean-mask compaction), and nvCOMP (``nvidia-nvcomp-cu13``) when it is importable.

Example (the GPU machine): ``python tools/bench_gpu.py --acts acts/ --out bench_gpu.json``
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

MIB = 1 << 20
SIZES_MIB = (1, 4, 16, 64, 256, 1024)
FLOAT_CODECS = ("signbits", "relumask", "zvc", "csr", "sparse", "dpr_fp16", "dpr_bf16", "dpr_fp10", "dpr_fp8",
                "sz")
SZ_EB = 1e-2          # absolute error bound for SZ on ReLU-scale activations (values of order 1)
L2_DEFEAT = 256 * MIB  # inputs smaller than this are rotated among copies totalling at least this


def _cp() -> Any:
    import cupy as cp

    return cp


def time_gpu(fn: Callable[[int], Any], reps: int, warmup: int = 3, rotate: int = 1) -> float:
    """Median seconds of fn(i) between CUDA events (host syncs inside fn are included), i cycling over rotate."""
    cp = _cp()
    for i in range(warmup):
        fn(i % rotate)
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for i in range(reps):
        start.record()
        fn(i % rotate)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return float(np.median(times))


def copy_bandwidth(nbytes: int, reps: int) -> float:
    """Bytes read + written per second by a device-to-device cudaMemcpyAsync of nbytes."""
    cp = _cp()
    rot = max(1, min(16, L2_DEFEAT // max(nbytes, 1)))
    src = [cp.empty(nbytes, dtype=cp.uint8) for _ in range(rot)]
    dst = cp.empty(nbytes, dtype=cp.uint8)
    for s in src:
        s.fill(1)
    t = time_gpu(lambda i: dst.data.copy_from_device_async(src[i].data, nbytes), reps, rotate=rot)
    return 2 * nbytes / t


# -- inputs -----------------------------------------------------------------------------------------------
def relu_like(cp: Any, n: int, seed: int) -> Any:
    """ReLU of a smooth random field (about half zeros, neighbouring values correlated, as in feature maps)."""
    rs = cp.random.RandomState(seed)
    x = rs.standard_normal(n, dtype=cp.float32)
    k = 8  # a short box filter: correlated neighbours, so SZ's Lorenzo predictor has something to find
    y = x.copy()
    for j in range(1, k):
        y[j:] += x[:-j]
    del x
    y *= np.float32(1 / math.sqrt(k))
    return cp.maximum(y, 0, out=y)


def pool_indices(cp: Any, x: Any) -> tuple[Any, dict[str, Any]]:
    """2x2/2 MaxPool indices (absolute flat NCHW, as ORT gives them) of a 4-D float32 tensor, via PyTorch."""
    import torch
    import torch.nn.functional as F

    t = torch.from_dlpack(x)
    N, C, H, W = t.shape
    _, idx = F.max_pool2d(t, 2, 2, return_indices=True)  # per-plane h*W + w
    idx += (torch.arange(N * C, device=t.device, dtype=torch.int64) * (H * W)).view(N, C, 1, 1)
    return cp.from_dlpack(idx), dict(input_shape=[N, C, H, W], kernel_shape=[2, 2], strides=[2, 2])


def as_4d(n: int) -> tuple[int, int, int, int]:
    """An (N, C, 64, 64)-ish NCHW shape of n elements (n a multiple of 4096)."""
    planes = n // 4096
    return (max(1, planes // 64), min(64, planes), 64, 64)


# -- references ---------------------------------------------------------------------------------------------
def references(cp: Any) -> dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]]:
    """name -> (encode(x) -> payload, decode(payload, x) -> y) built from CuPy's own ops."""
    def pack_enc(x: Any) -> Any:
        return cp.packbits(x > 0, bitorder="little")

    def pack_dec(p: Any, x: Any) -> Any:
        return cp.unpackbits(p, bitorder="little")[:x.size].astype(cp.float32)

    def mask_enc(x: Any) -> Any:
        m = x != 0
        return cp.packbits(m, bitorder="little"), x[m]

    def mask_dec(p: Any, x: Any) -> Any:
        bits, vals = p
        m = cp.unpackbits(bits, bitorder="little")[:x.size].view(cp.bool_)
        y = cp.zeros(x.size, cp.float32)
        y[m] = vals
        return y

    return {
        "cupy:packbits(x>0)": (pack_enc, pack_dec),
        "cupy:astype(float16)": (lambda x: x.astype(cp.float16), lambda p, x: p.astype(cp.float32)),
        "cupy:mask-compact": (mask_enc, mask_dec),
    }


def nvcomp_codecs() -> dict[str, Any]:
    try:
        from nvidia import nvcomp
    except ImportError:
        return {}
    out = {}
    for algo in ("Cascaded", "Bitcomp", "ANS", "LZ4"):
        try:
            out[f"nvcomp:{algo}"] = nvcomp.Codec(algorithm=algo)
        except Exception as exc:  # noqa: BLE001  (an algorithm missing from this build)
            print(f"nvcomp {algo}: unavailable ({exc})", file=sys.stderr)
    return out


# -- one measurement ----------------------------------------------------------------------------------------
def nbytes_of(payload: Any) -> int:
    if isinstance(payload, tuple):
        return int(sum(int(p.nbytes) for p in payload))
    return int(payload.nbytes) if hasattr(payload, "nbytes") else int(payload.buffer_size)


def measure(label: str, codec_name: str, xs: list[Any], enc: Callable[[Any], Any], dec: Callable[[Any, Any], Any],
            check: Callable[[Any, Any], bool] | None, reps: int, copy_bw: float) -> dict[str, Any]:
    cp = _cp()
    payloads = [enc(x) for x in xs]
    y = dec(payloads[0], xs[0])
    ok = bool(check(xs[0], y)) if check is not None else None
    # decode's bytes are what it writes (relumask decodes to one byte per element, not four)
    out_bytes = int(y.nbytes) if hasattr(y, "nbytes") else int(xs[0].nbytes)
    del y
    raw = int(xs[0].nbytes)
    t_enc = time_gpu(lambda i: enc(xs[i]), reps, rotate=len(xs))
    t_dec = time_gpu(lambda i: dec(payloads[i], xs[i]), reps, rotate=len(xs))
    comp = nbytes_of(payloads[0])
    del payloads
    cp.get_default_memory_pool().free_all_blocks()
    row = {"input": label, "codec": codec_name, "bytes": raw, "payload_bytes": comp, "ratio": raw / max(comp, 1),
           "decoded_bytes": out_bytes, "encode_s": t_enc, "decode_s": t_dec, "encode_GBps": raw / t_enc / 1e9,
           "decode_GBps": out_bytes / t_dec / 1e9, "copy_GBps": copy_bw / 1e9, "encode_of_copy": raw / t_enc / copy_bw,
           "decode_of_copy": out_bytes / t_dec / copy_bw, "roundtrip_ok": ok}
    print(f"{label:>28} {codec_name:>22} {raw / MIB:9.1f} MiB  ratio {row['ratio']:7.2f}  "
          f"enc {row['encode_GBps']:8.1f} GB/s ({row['encode_of_copy']:.2f})  "
          f"dec {row['decode_GBps']:8.1f} GB/s ({row['decode_of_copy']:.2f})  ok={ok}", flush=True)
    return row


def codec_runner(cp: Any, name: str, params: dict[str, Any]) -> tuple[Callable, Callable, Callable]:
    from onnxcomp.custom_ops import get_codec

    codec = get_codec(name)

    def enc(x: Any) -> Any:
        return codec.encode(x, **params)

    def dec(p: Any, x: Any) -> Any:
        return codec.decode(p, **params)

    def check(x: Any, y: Any) -> bool:
        if name in ("signbits",):
            return bool(cp.array_equal(y, (x > 0).astype(cp.float32)))
        if name == "relumask":
            return bool(cp.array_equal(y, x > 0))
        if name == "sz":
            return bool(cp.all(cp.abs(y.astype(cp.float64) - x.astype(cp.float64)) <= params["eb"]))
        if name.startswith("dpr_"):
            return bool(cp.all(cp.abs(y - x) <= cp.abs(x) * 2.0 ** -(1 + {"dpr_fp16": 10, "dpr_bf16": 7,
                                                                            "dpr_fp10": 4, "dpr_fp8": 3}[name])
                               + 2.0 ** -9))
        return bool(cp.array_equal(y.reshape(-1).view(cp.uint8), x.reshape(-1).view(cp.uint8)))

    return enc, dec, check


def bench_input(label: str, make: Callable[[int], Any], nbytes: int, reps: int, copy_bw: float,
                codecs: tuple[str, ...], with_refs: bool, nvc: dict[str, Any], with_pool: bool) -> list[dict[str, Any]]:
    cp = _cp()
    rot = max(1, min(8, L2_DEFEAT // max(nbytes, 1)))
    xs = [make(i) for i in range(rot)]
    rows = []
    for name in codecs:
        params = {"eb": SZ_EB} if name == "sz" else {}
        enc, dec, check = codec_runner(cp, name, params)
        rows.append(measure(label, name, xs, enc, dec, check, reps, copy_bw))
    if with_pool and xs[0].ndim == 4 and xs[0].shape[2] % 2 == 0 and xs[0].shape[3] % 2 == 0:
        pools = [pool_indices(cp, x) for x in xs]
        params = pools[0][1]
        enc, dec, check = codec_runner(cp, "maxpool_index", params)
        rows.append(measure(label + " (pool idx)", "maxpool_index", [p[0] for p in pools], enc, dec, check, reps,
                            copy_bw))
        del pools
    if with_refs:
        for rname, (renc, rdec) in references(cp).items():
            rows.append(measure(label, rname, xs, renc, rdec, None, reps, copy_bw))
        for nname, ncodec in nvc.items():
            from nvidia import nvcomp

            def nenc(x: Any, c: Any = ncodec) -> Any:
                return c.encode(nvcomp.as_array(x))

            def ndec(p: Any, x: Any, c: Any = ncodec) -> Any:
                return c.decode(p)

            try:
                rows.append(measure(label, nname, xs, nenc, ndec, None, reps, copy_bw))
            except Exception as exc:  # noqa: BLE001  (keep the table going; say what failed)
                print(f"{label}: {nname} failed: {exc}", flush=True)
    del xs
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def load_acts(folder: Path) -> list[tuple[str, np.ndarray]]:
    files = sorted(folder.glob("*.npy"))
    return [(f.stem, np.load(f)) for f in files]


def run_once(n: int, codecs: tuple[str, ...]) -> None:
    """Each codec's kernels launched once (encode + decode), so a profiler sees one launch of each."""
    cp = _cp()
    x = relu_like(cp, n, 0).reshape(as_4d(n))
    for name in codecs:
        enc, dec, _ = codec_runner(cp, name, {"eb": SZ_EB} if name == "sz" else {})
        dec(enc(x), x)
    idx, params = pool_indices(cp, x)
    enc, dec, _ = codec_runner(cp, "maxpool_index", params)
    dec(enc(idx), idx)
    cp.cuda.Device().synchronize()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES_MIB)), help="synthetic sizes in MiB")
    ap.add_argument("--acts", type=Path, help="folder of real activations (.npy from tools/dump_activations.py)")
    ap.add_argument("--codecs", default=",".join(FLOAT_CODECS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-refs", action="store_true", help="skip the CuPy / nvCOMP references")
    ap.add_argument("--out", type=Path, help="write all rows as JSON here")
    ap.add_argument("--once", action="store_true",
                    help="encode and decode once per codec at the first size, untimed (for ncu)")
    args = ap.parse_args(argv)
    if args.once:
        return run_once(int(args.sizes.split(",")[0]) * MIB // 4, tuple(c for c in args.codecs.split(",") if c))

    cp = _cp()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    print(f"device {device}, CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}", flush=True)
    codecs = tuple(c for c in args.codecs.split(",") if c)
    nvc = {} if args.no_refs else nvcomp_codecs()
    rows: list[dict[str, Any]] = []
    copy_cache: dict[int, float] = {}

    def copy_bw(nbytes: int) -> float:
        if nbytes not in copy_cache:
            copy_cache[nbytes] = copy_bandwidth(nbytes, args.reps)
            print(f"copy {nbytes / MIB:.1f} MiB: {copy_cache[nbytes] / 1e9:.1f} GB/s (read + write)", flush=True)
        return copy_cache[nbytes]

    t0 = time.time()
    if args.acts:
        for stem, a in load_acts(args.acts):
            if a.dtype != np.float32:
                continue
            host = np.ascontiguousarray(a)
            rows += bench_input(f"real:{stem}", lambda i, h=host: cp.asarray(h), host.nbytes, args.reps,
                                copy_bw(host.nbytes), codecs, False, {}, host.ndim == 4)
    for mib in (int(s) for s in args.sizes.split(",") if s):
        n = mib * MIB // 4
        shape = as_4d(n)
        rows += bench_input(f"synthetic relu {mib} MiB", lambda i, n=n, s=shape: relu_like(cp, n, i).reshape(s),
                            n * 4, args.reps, copy_bw(n * 4), codecs, not args.no_refs, nvc, True)
    print(f"total {time.time() - t0:.0f} s", flush=True)
    if args.out:
        meta = {"device": device, "cupy": cp.__version__, "reps": args.reps, "sz_eb": SZ_EB,
                "convention": "GB/s = uncompressed bytes / time (1e9); copy GB/s = 2 x bytes / memcpy time; "
                              "of_copy = GB/s / copy GB/s; ratio = uncompressed / payload bytes",
                "argv": sys.argv}
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        os.replace(tmp, args.out)
    summary(rows)


def summary(rows: list[dict[str, Any]]) -> None:
    """Worst (min) fraction of copy bandwidth per codec over the synthetic sizes >= 64 MiB."""
    big = [r for r in rows if r["input"].startswith("synthetic") and r["bytes"] >= 64 * MIB]
    print("\ncodec                  enc-of-copy(min..max)  dec-of-copy(min..max)  ratio  (synthetic >= 64 MiB)")
    for name in dict.fromkeys(r["codec"] for r in big):
        rs = [r for r in big if r["codec"] == name]
        e = [r["encode_of_copy"] for r in rs]
        d = [r["decode_of_copy"] for r in rs]
        print(f"{name:22} {min(e):6.2f}..{max(e):5.2f}         {min(d):6.2f}..{max(d):5.2f}       "
              f"{np.median([r['ratio'] for r in rs]):6.2f}")


if __name__ == "__main__":
    main()
