"""A/B of the maxpool_index, dpr_fp10 and sparse (+ zvc) CPU codecs: this checkout's against a git revision's,
interleaved in one process, through the codecs' own ``encode_cpu`` / ``decode_cpu`` (header checks included).

For every (codec, backend) the payloads and decoded tensors of both revisions are asserted byte-identical
first; then every round times each variant once (old and new next to each other, each right after an untimed
call so that its input is as cache-warm as in ``tools/bench_codecs.py``'s repeats; odd rounds run the new variant
first, so neither revision always follows the other) together with a 64 MiB ``np.copyto`` on one thread per core,
as in ``tools/bench_codecs.py``. Reported: best and median of process CPU
time (all threads) and of wall time, each as MB per second and as a fraction of the same round set's copy.

    flock /tmp/timing.lock .venv/bin/python docs/codecs/codecthru/ab_codecs.py --dir /tmp/codecthru/acts \\
        --base d8284a1 --repeat 9
"""
from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
import custom_ops as new  # noqa: E402  (this checkout's codecs, imported by path, not the installed package)
from bench_codecs import maxpool_indices  # noqa: E402

MB = 1e6


def load_base(rev: str) -> Any:
    """The ``custom_ops`` package at ``rev``, importable beside this one as ``custom_ops_base``."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "custom_ops"], check=True,
                         capture_output=True).stdout
    dest = Path(tempfile.mkdtemp(prefix="ab_base_"))
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(dest, filter="data")
    (dest / "custom_ops").rename(dest / "custom_ops_base")
    sys.path.insert(0, str(dest))
    return importlib.import_module("custom_ops_base")


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, required=True, help="dump_activations.py output")
    ap.add_argument("--base", default="d8284a1")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--codecs", nargs="+", default=["maxpool_index", "dpr_fp10", "sparse", "zvc"])
    ap.add_argument("--backends", nargs="+", default=["numpy", "numba"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    old = load_base(args.base)
    pkgs = {args.base: old, "new": new}
    for p in pkgs.values():
        importlib.import_module(p.__name__ + ".maxpool_index")
        importlib.import_module(p.__name__ + ".sparse_adaptive")
    relu_in = np.load(next(args.dir.glob("*_relu_relu_in.npy"), None) or sorted(args.dir.glob("*relu_in.npy"))[-1])
    relu_out = np.load(sorted(args.dir.glob("*_relu_relu_out.npy"), key=lambda p: -p.stat().st_size)[0])
    tensors = {f"dpr_{f}": (relu_in.astype(np.float32), {}) for f in ("fp16", "bf16", "fp10", "fp8")}
    tensors.update({"sparse": (relu_out, {}), "zvc": (relu_out, {}), "maxpool_index": maxpool_indices(relu_out)})
    default = {"maxpool_index": "numpy", **{f"dpr_{f}": "numba" for f in ("fp16", "bf16", "fp10", "fp8")},
               "sparse": "numpy (lossless graphs) / numba (if loaded)",
               "zvc": "numpy / numba (if loaded)"}
    fns: dict[tuple[str, str, str, str], Callable[[], Any]] = {}
    for codec in args.codecs:
        x, params = tensors[codec]
        for backend in args.backends:
            outs = {}
            for tag, p in pkgs.items():
                c = p.get_codec(codec)
                with p.cpu.use_backend(backend):
                    pay = c.encode_cpu(x, **params)
                    outs[tag] = (pay, c.decode_cpu(pay, **params))

                # Everything bound as defaults: the loop variables (x, params, ...) move on.
                def enc(p: Any = p, c: Any = c, backend: str = backend, x: Any = x, params: Any = params) -> Any:
                    with p.cpu.use_backend(backend):
                        return c.encode_cpu(x, **params)

                def dec(p: Any = p, c: Any = c, backend: str = backend, pay: Any = outs[tag][0],
                        params: Any = params) -> Any:
                    with p.cpu.use_backend(backend):
                        return c.decode_cpu(pay, **params)

                fns[(codec, backend, "encode", tag)] = enc
                fns[(codec, backend, "decode", tag)] = dec
            (po, yo), (pn, yn) = outs[args.base], outs["new"]
            assert same(po, pn), f"{codec}/{backend}: payload differs from {args.base}"
            assert same(yo, yn), f"{codec}/{backend}: decode differs from {args.base}"
            assert not pkgs["new"].get_codec(codec).lossless or yn.tobytes() == np.asarray(x).tobytes()
            print(f"{codec:14s} {backend:6s} payload and decode identical to {args.base} "
                  f"({sum(np.asarray(a).nbytes for a in pn)} payload bytes)", flush=True)
    src = np.random.default_rng(0).random(16 << 20, dtype=np.float32)
    dst = np.empty_like(src)
    cores = os.cpu_count() or 1
    bounds = np.linspace(0, src.size, cores + 1).astype(int)
    pool = ThreadPoolExecutor(cores)

    def copy() -> None:
        list(pool.map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]]), range(cores)))

    allf = {("copy", "", "", ""): copy, **fns}
    for f in allf.values():
        f()  # warm-up: compiled kernels loaded, tables cached
    cpu_s: dict[Any, list[float]] = {k: [] for k in allf}
    wall_s: dict[Any, list[float]] = {k: [] for k in allf}
    load0 = os.getloadavg()
    t0 = time.strftime("%H:%M:%S", time.gmtime())
    keys = list(allf)
    flipped = [k for k in keys if k[0] == "copy"] + sorted(  # the same (codec, backend, direction), new first
        (k for k in keys if k[0] != "copy"), key=lambda k: (keys.index((*k[:3], args.base)), k[3] != "new"))
    for rnd in range(args.repeat):
        for k in (keys if rnd % 2 == 0 else flipped):  # odd rounds run each new variant before its old one
            f = allf[k]
            f()  # untimed call first: inputs cache-warm as in bench_codecs (its repeats), not evicted by the copy
            w, c = time.perf_counter(), time.process_time()
            f()
            cpu_s[k].append(time.process_time() - c)
            wall_s[k].append(time.perf_counter() - w)
    load1 = os.getloadavg()
    ref = {kind: src.nbytes / min(d[("copy", "", "", "")]) for kind, d in (("cpu", cpu_s), ("wall", wall_s))}
    refm = {kind: src.nbytes / statistics.median(d[("copy", "", "", "")])
            for kind, d in (("cpu", cpu_s), ("wall", wall_s))}
    print(f"\n{t0} UTC, {args.repeat} rounds, load {load0[0]:.1f} -> {load1[0]:.1f}; copy 64 MiB on {cores} threads: "
          f"{ref['cpu'] / MB:.0f} MB per CPU s (median {refm['cpu'] / MB:.0f}), {ref['wall'] / MB:.0f} MB/s wall "
          f"(median {refm['wall'] / MB:.0f}). (x) = best / best copy, median / median copy.\n")
    print("| codec | backend | direction | rev | MB per CPU s best (x) | median (x) | wall MB/s best (x) "
          "| median (x) |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    rows = []
    for k in fns:
        codec, backend, direction, tag = k
        nbytes = np.asarray(tensors[codec][0]).nbytes
        r = {"codec": codec, "backend": backend, "direction": direction, "rev": tag, "bytes": nbytes}
        cells = []
        for kind, d in (("cpu", cpu_s), ("wall", wall_s)):
            best, med = nbytes / min(d[k]), nbytes / statistics.median(d[k])
            r[f"{kind}_best"], r[f"{kind}_median"] = best / ref[kind], med / refm[kind]
            cells += [f"{best / MB:.0f} ({best / ref[kind]:.2f})", f"{med / MB:.0f} ({med / refm[kind]:.2f})"]
        rows.append(r)
        print(f"| {codec} | {backend} | {direction} | {'this' if tag == 'new' else tag} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps({"time_utc": t0, "load": [load0, load1], "copy": ref, "copy_median": refm,
                                        "rows": rows, "default_backend": default}, indent=1))


if __name__ == "__main__":
    main()
