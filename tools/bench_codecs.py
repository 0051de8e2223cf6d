"""Throughput of every codec, both directions, on real activations, against the machine's copy bandwidth.

For each codec it runs the NumPy reference and the compiled numba kernels (``custom_ops/cpu``) on tensors
dumped from training by ``tools/dump_activations.py`` and reports MB/s of raw tensor bytes (best and median
of ``--repeat`` wall-clock runs), the fraction of copy bandwidth, the compression ratio, and checks that both
backends produce the same payload bytes. Inputs per codec: ``signbits`` / ``relumask`` / ``dpr_*`` the ReLU
inputs, ``zvc`` / ``csr`` / ``sparse`` / ``sz`` the ReLU outputs, ``maxpool_index`` the indices of a 3x3 /
stride 2 / pad 1 MaxPool (ResNet's stem) over the ReLU outputs. Baselines on the same tensors: zstd (levels
1 and 3) and lz4 on the raw bytes (lossless), and SZ3 (``pysz``) at the same absolute error bound as ``sz``
(``--rel`` x the tensor's value range).

Copy bandwidth: ``np.copyto`` of 64 MiB on one thread and on every core (one thread per core, each copying
its slice); MB/s count the bytes copied once (source size), as the codec figures count raw tensor bytes.

    .venv/bin/python tools/dump_activations.py --model resnet18 --image 64 --batch 32 --dump-batch 32 \\
        --steps 10 --layers 3 --out /tmp/acts
    .venv/bin/python tools/bench_codecs.py --dir /tmp/acts --out docs/codecs/bench.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np

from onnxcomp.custom_ops import get_codec
from onnxcomp.custom_ops import cpu
from onnxcomp.custom_ops.cpu import aot
from onnxcomp.fileio import atomic_output

MB = 1e6


_cpu_seconds: list[float] = []  # least process CPU time (all threads) of the last timed() call


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(best, median) wall seconds over ``repeat`` runs after one warm-up, and the last result; the least
    process CPU time of those runs (every thread's, so a parallel kernel's total work) goes to
    ``_cpu_seconds[-1]``: on a loaded machine it is inflated far less than wall time."""
    out = fn()
    times, cpu_times = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
    _cpu_seconds.append(min(cpu_times))
    return min(times), statistics.median(times), out


def copy_bandwidth(nbytes: int = 64 << 20, repeat: int = 15) -> dict[str, float]:
    """np.copyto of ``nbytes``: MB/s (best, median) on one thread and on one thread per core."""
    src = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    cores = os.cpu_count() or 1
    b1, m1, _ = timed(lambda: np.copyto(dst, src), repeat)
    c1 = _cpu_seconds[-1]
    bounds = np.linspace(0, src.size, cores + 1).astype(int)
    with ThreadPoolExecutor(cores) as pool:  # np.copyto releases the GIL
        def all_cores() -> None:
            list(pool.map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]]),
                          range(cores)))

        bn, mn, _ = timed(all_cores, repeat)
        cn = _cpu_seconds[-1]
    return {"bytes": nbytes, "cores": cores, "one_best": nbytes / b1 / MB, "one_median": nbytes / m1 / MB,
            "all_best": nbytes / bn / MB, "all_median": nbytes / mn / MB,
            "one_per_cpu_second": nbytes / c1 / MB, "all_per_cpu_second": nbytes / cn / MB}


def maxpool_indices(x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """ORT-style absolute int64 MaxPool indices (3x3, stride 2, pad 1) of an NCHW tensor, and the params."""
    import torch

    n, c, h, w = x.shape
    _, ind = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1, return_indices=True)
    planes = (np.arange(n * c, dtype=np.int64) * h * w).reshape(n, c, 1, 1)
    params = dict(input_shape=[n, c, h, w], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return ind.numpy() + planes, params


def bench_codec(name: str, x: np.ndarray, params: dict[str, Any], repeat: int,
                timed_backends: tuple[str, ...] = cpu.BACKENDS) -> dict[str, Any]:
    """One codec on one tensor: MB/s per backend in ``timed_backends``; every other backend runs once, untimed,
    for the ratio and the same-bytes check (the NumPy zfp coder runs at ~1 MB/s)."""
    codec = get_codec(name)
    raw = x.nbytes
    row: dict[str, Any] = {"codec": name, "shape": list(x.shape), "raw_bytes": raw}
    payloads = {}
    for backend in cpu.BACKENDS:
        if backend in ("numba", "aot") and not cpu.numba_available():
            continue
        if backend == "aot" and _kernel_module(name) not in aot.MODULES:
            continue  # would run NumPy again
        with cpu.use_backend(backend):
            if backend not in timed_backends:
                payload = codec.encode_cpu(x, **params)
                payloads[backend] = (payload, codec.decode_cpu(payload, **params))
                continue
            eb, em, payload = timed(lambda: codec.encode_cpu(x, **params), repeat)
            ec = _cpu_seconds[-1]
            db, dm, y = timed(lambda: codec.decode_cpu(payload, **params), repeat)
            dc = _cpu_seconds[-1]
        payloads[backend] = (payload, y)
        row[backend] = {"encode_best": raw / eb / MB, "encode_median": raw / em / MB,
                        "decode_best": raw / db / MB, "decode_median": raw / dm / MB,
                        "encode_per_cpu_second": raw / ec / MB, "decode_per_cpu_second": raw / dc / MB}
    payload, y = payloads["numpy"]
    row["ratio"] = raw / codec.payload_nbytes(payload)
    others = [payloads[b] for b in ("numba", "aot") if b in payloads]
    if others:
        row["same_bytes"] = all(all(a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in zip(payload, p2))
                                and y.tobytes() == y2.tobytes() for p2, y2 in others)
    return row


def bench_lossless_baselines(x: np.ndarray, repeat: int) -> list[dict[str, Any]]:
    import zstandard

    raw = x.tobytes()
    rows = []
    for level in (1, 3):
        comp = zstandard.ZstdCompressor(level=level)
        dec = zstandard.ZstdDecompressor()
        eb, em, frame = timed(lambda: comp.compress(raw), repeat)
        ec = _cpu_seconds[-1]
        db, dm, _ = timed(lambda: dec.decompress(frame), repeat)
        rows.append(_baseline(f"zstd-{level}", x, len(frame), eb, em, db, dm, ec, _cpu_seconds[-1]))
    try:
        import lz4.frame
    except ImportError:
        return rows
    eb, em, frame = timed(lambda: lz4.frame.compress(raw), repeat)
    ec = _cpu_seconds[-1]
    db, dm, _ = timed(lambda: lz4.frame.decompress(frame), repeat)
    rows.append(_baseline("lz4", x, len(frame), eb, em, db, dm, ec, _cpu_seconds[-1]))
    return rows


def bench_sz3(x: np.ndarray, eb_abs: float, repeat: int) -> dict[str, Any] | None:
    try:
        import pysz
    except ImportError:
        return None
    n, c, h, w = x.shape
    xs = np.ascontiguousarray(x.reshape(n * c, h, w) if h * w > 1 else x.reshape(-1))
    cfg = pysz.szConfig()
    cfg.errorBoundMode = pysz.szErrorBoundMode.ABS
    cfg.absErrorBound = eb_abs
    eb, em, (comp, _) = timed(lambda: pysz.sz.compress(xs, cfg), repeat)
    ec = _cpu_seconds[-1]
    db, dm, _ = timed(lambda: pysz.sz.decompress(comp, np.float32, xs.shape), repeat)
    return _baseline("SZ3", x, comp.nbytes, eb, em, db, dm, ec, _cpu_seconds[-1])


def _baseline(name: str, x: np.ndarray, nbytes: int, eb: float, em: float, db: float, dm: float, ec: float,
              dc: float) -> dict[str, Any]:
    raw = x.nbytes
    return {"codec": name, "shape": list(x.shape), "raw_bytes": raw, "ratio": raw / nbytes,
            "single": {"encode_best": raw / eb / MB, "encode_median": raw / em / MB,
                       "decode_best": raw / db / MB, "decode_median": raw / dm / MB,
                       "encode_per_cpu_second": raw / ec / MB, "decode_per_cpu_second": raw / dc / MB}}


def inputs(directory: Path, largest: int) -> dict[str, list[tuple[str, np.ndarray]]]:
    """The dumped tensors by kind (relu_in / relu_out / conv_in), largest first, at most ``largest`` each."""
    kinds: dict[str, list[tuple[str, np.ndarray]]] = {}
    for path in sorted(directory.glob("*.npy")):
        kind = next((k for k in ("relu_in", "relu_out", "conv_in") if path.stem.endswith(k)), None)
        if kind is not None:
            kinds.setdefault(kind, []).append((path.stem, np.load(path).astype(np.float32, copy=False)))
    for kind in kinds:
        kinds[kind] = sorted(kinds[kind], key=lambda t: -t[1].nbytes)[:largest]
    if not kinds.get("relu_in") or not kinds.get("relu_out"):
        raise SystemExit(f"bench_codecs: no *_relu_in.npy / *_relu_out.npy in {directory}; "
                         "write them with tools/dump_activations.py")
    return kinds


RELU_IN_CODECS = ("signbits", "relumask", "dpr_fp16", "dpr_bf16", "dpr_fp10", "dpr_fp8")
RELU_OUT_CODECS = ("zvc", "csr", "sparse", "sz", "zfp", "maxpool_index")
BASELINES = ("SZ3", "zstd", "lz4")


def run(directory: Path, repeat: int, largest: int, rel: float, rate: int,
        only: frozenset[str] | None = None, timed_backends: tuple[str, ...] = cpu.BACKENDS) -> dict[str, Any]:
    want = lambda name: only is None or name in only  # noqa: E731
    with cpu.use_backend("numba"):
        cpu.warm_up()  # compile / load every kernel before timing
    copy = copy_bandwidth()
    kinds = inputs(directory, largest)
    rows: list[dict[str, Any]] = []
    for tname, x in kinds["relu_in"]:
        for name in filter(want, RELU_IN_CODECS):
            rows.append({"tensor": tname, **bench_codec(name, x, {}, repeat, timed_backends)})
        if want("intervalmask"):  # ReLU6-style interval [0, 6]
            params = {"lo": 0.0, "hi": 6.0}
            rows.append({"tensor": tname, **params, **bench_codec("intervalmask", x, params, repeat, timed_backends)})
    for tname, x in kinds["relu_out"]:
        for name in filter(want, ("zvc", "csr", "sparse")):
            rows.append({"tensor": tname, **bench_codec(name, x, {}, repeat, timed_backends)})
        eb_abs = rel * float(x.max() - x.min())
        if want("sz"):
            rows.append({"tensor": tname, "eb": eb_abs, **bench_codec("sz", x, {"eb": eb_abs}, repeat, timed_backends)})
        if want("zfp"):
            rows.append({"tensor": tname, "rate": rate, **bench_codec("zfp", x, {"rate": rate}, repeat, timed_backends)})
        if want("SZ3") and (sz3 := bench_sz3(x, eb_abs, repeat)) is not None:
            rows.append({"tensor": tname, "eb": eb_abs, **sz3})
        if want("zstd") or want("lz4"):
            rows += [{"tensor": tname, **r} for r in bench_lossless_baselines(x, repeat)]
        if want("maxpool_index") and x.ndim == 4 and x.shape[2] >= 4:
            idx, params = maxpool_indices(x)
            rows.append({"tensor": tname + "_maxpool3s2", **bench_codec("maxpool_index", idx, params, repeat, timed_backends)})
    import numba

    env = {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
           "threading_layer": numba.threading_layer(), "numba_threads": numba.config.NUMBA_NUM_THREADS,
           "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "load_avg": os.getloadavg(), "repeat": repeat, "rel_eb": rel, "zfp_rate": rate,
           "timed_backends": list(timed_backends),
           "default_backend": {r["codec"]: cpu.backend_for(_kernel_module(r["codec"]))
                               for r in rows if "numpy" in r or "numba" in r}}
    return {"env": env, "copy": copy, "rows": rows}


def _kernel_module(codec: str) -> str:
    """The ``custom_ops/cpu`` module (or "zfp") whose backend setting a codec follows under ``auto``."""
    if codec.startswith("dpr_"):
        return "dpr"
    return {"signbits": "bits", "relumask": "bits", "bitmask": "bits", "maxpool_index": "maxpool", "zvc": "sparse",
            "csr": "sparse", "sparse": "sparse"}.get(codec, codec)


def table(result: dict[str, Any]) -> str:
    """Markdown: one line per (codec, tensor): ratio, then per direction MB/s wall (best) and MB per CPU second
    (all threads) for NumPy and compiled, each with its fraction of the copy measured the same way."""
    c = result["copy"]
    copy, copy_cpu = c["all_best"], c.get("all_per_cpu_second", c["one_per_cpu_second"])
    defaults = result["env"].get("default_backend", {})
    lines = [f"copy (np.copyto, 64 MiB, {c['cores']} threads): {copy:.0f} MB/s wall (best; median "
             f"{c['all_median']:.0f}), {copy_cpu:.0f} MB per CPU second; one thread {c['one_best']:.0f} MB/s, "
             f"{c['one_per_cpu_second']:.0f} MB per CPU second. (×) = fraction of the copy's figure of the same kind. "
             f"Load average {', '.join(f'{v:.1f}' for v in result['env']['load_avg'])}.",
             "",
             "| codec | tensor | ratio | default | encode wall MB/s: numpy → compiled (×) "
             "| encode per CPU s: numpy → compiled (×) "
             "| decode wall MB/s: numpy → compiled (×) | decode per CPU s: numpy → compiled (×) | same bytes |",
             "|---|---|---:|:-:|---:|---:|---:|---:|:-:|"]

    def cell(a: dict[str, Any] | None, b: dict[str, Any], key: str, ref: float) -> str:
        left = f"{a[key]:.0f} ({a[key] / ref:.2f}) → " if a is not None else ""
        return f"{left}**{b[key]:.0f}** ({b[key] / ref:.2f})"

    for r in result["rows"]:
        if "numpy" in r or "numba" in r:
            # "numpy → compiled" where both were timed, else the one that was (--backends)
            a, b = (r["numpy"], r["numba"]) if "numpy" in r and "numba" in r else (None, r.get("numba", r.get("numpy")))
            same = {True: "yes", False: "**NO**"}.get(r.get("same_bytes"), "—")
            default = defaults.get(r["codec"], "")
        else:
            a, b, same, default = None, r["single"], "—", "1 thread"
        extra = f" eb {r['eb']:.3g}" if "eb" in r else (f" rate {r['rate']}" if "rate" in r else "")
        # the AOT kernels (what a process without numba runs: lossless graphs) get a row of their own
        for label, bb in ((r["codec"], b), (f"{r['codec']} (aot)", r.get("aot"))):
            if bb is None:
                continue
            lines.append(f"| {label}{extra} | {r['tensor']} {tuple(r['shape'])} | {r['ratio']:.2f} | {default} "
                         f"| {cell(a, bb, 'encode_best', copy)} | {cell(a, bb, 'encode_per_cpu_second', copy_cpu)} "
                         f"| {cell(a, bb, 'decode_best', copy)} | {cell(a, bb, 'decode_per_cpu_second', copy_cpu)} "
                         f"| {same} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="directory of .npy files from dump_activations.py")
    ap.add_argument("--repeat", type=int, default=9, help="timed runs per measurement (best and median kept)")
    ap.add_argument("--largest", type=int, default=2, help="tensors per kind, largest first")
    ap.add_argument("--rel", type=float, default=1e-2, help="sz / SZ3 error bound relative to the value range")
    ap.add_argument("--rate", type=int, default=8, help="zfp's fixed rate (bits per value)")
    ap.add_argument("--codecs", nargs="+", help=f"only these codecs / baselines (default: all of "
                    f"{', '.join(RELU_IN_CODECS + RELU_OUT_CODECS + BASELINES)})")
    ap.add_argument("--backends", nargs="+", choices=cpu.BACKENDS, default=list(cpu.BACKENDS),
                    help="backends to time (the others run once, untimed, for the ratio and the same-bytes check)")
    ap.add_argument("--out", type=Path, help="write every figure as JSON here (and the table beside it, .md)")
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        ap.error(f"--dir {args.dir} is not a directory")
    result = run(args.dir, args.repeat, args.largest, args.rel, args.rate,
                 frozenset(args.codecs) if args.codecs else None, tuple(args.backends))
    text = table(result)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for path, content in ((args.out, json.dumps(result, indent=1)), (args.out.with_suffix(".md"), text + "\n")):
            with atomic_output(path) as tmp:
                Path(tmp).write_text(content)
    bad = [r for r in result["rows"] if r.get("same_bytes") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
