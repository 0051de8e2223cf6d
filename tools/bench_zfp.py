"""Benchmark the fixed-rate ``zfp`` codec against zfp itself (``zfpy``) at equal rate on real activations.

For every float32 ``.npy`` in ``--dir`` (tools/dump_activations.py writes them) and every rate: compression
ratio, max and RMS error, encode/decode MB/s, for

* ``onnxcomp zfp``      — our codec (numba block coder when numba is installed, else the NumPy coder),
* ``onnxcomp zfp (np)`` — the vectorised NumPy coder (``--numpy``),
* ``zfpy 2-D``          — zfp's fixed-rate mode on the tensor viewed as (N·C·H, W): the same 4×4 blocks,
* ``zfpy N-D``          — zfp on the tensor as it is (4-D blocks of 4⁴ values for NCHW),
* ``dpr fp8`` / ``dpr fp16`` at rates 8 / 16 — Gist's reduced precision at the same bits per value.

Errors are over finite elements. Example:

    .venv/bin/python tools/dump_activations.py --model resnet18 --image 64 --out /tmp/acts
    .venv/bin/python tools/bench_zfp.py --dir /tmp/acts --rates 4 8 12 16 --out /tmp/zfp_bench
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from onnxcomp.custom_ops import zfp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from activation_bench import best_time as _best, distinct_activations, write_results  # noqa: E402

ZFP = zfp.ZFP()


def _errors(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    fin = np.isfinite(x)
    d = x[fin].astype(np.float64) - y[fin].astype(np.float64)
    return (float(np.abs(d).max()), float(np.sqrt(np.mean(d * d)))) if d.size else (0.0, 0.0)


def _row(method: str, x: np.ndarray, nbytes: int, t_enc: float, t_dec: float, y: np.ndarray) -> dict[str, Any]:
    mb = x.nbytes / 1e6
    max_err, rms = _errors(x, y)
    scale = float(np.abs(x[np.isfinite(x)]).max()) if np.isfinite(x).any() else 1.0
    return {"method": method, "ratio": x.nbytes / nbytes, "bytes": int(nbytes), "enc_MBps": mb / t_enc,
            "dec_MBps": mb / t_dec, "max_err": max_err, "rms_err": rms, "rel_rms": rms / scale if scale else 0.0}


def bench_ours(x: np.ndarray, rate: int, repeat: int, numba: bool) -> dict[str, Any]:
    saved = zfp.USE_NUMBA
    zfp.USE_NUMBA = numba and saved
    try:
        ZFP.encode(x[:1], rate=rate)  # compile / warm up outside the timing
        t_enc, payload = _best(lambda: ZFP.encode(x, rate=rate), repeat)
        t_dec, y = _best(lambda: ZFP.decode(payload), repeat)
    finally:
        zfp.USE_NUMBA = saved
    name = "onnxcomp zfp" if zfp.USE_NUMBA and numba else "onnxcomp zfp (np)"
    return _row(name, x, ZFP.payload_nbytes(payload), t_enc, t_dec, y)


def bench_zfpy(x: np.ndarray, rate: int, repeat: int, two_d: bool) -> dict[str, Any]:
    import zfpy

    a = np.ascontiguousarray(x.reshape(-1, x.shape[-1]) if two_d and x.ndim > 2 else x)
    t_enc, blob = _best(lambda: zfpy.compress_numpy(a, rate=rate), repeat)
    t_dec, y = _best(lambda: zfpy.decompress_numpy(blob), repeat)
    return _row("zfpy 2-D" if two_d else "zfpy N-D", x, len(blob), t_enc, t_dec, y.reshape(x.shape))


def bench_dpr(x: np.ndarray, rate: int, repeat: int) -> dict[str, Any] | None:
    from onnxcomp.custom_ops import get_codec

    fmt = {8: "fp8", 16: "fp16"}.get(rate)
    if fmt is None:
        return None
    codec = get_codec(f"dpr_{fmt}")
    t_enc, payload = _best(lambda: codec.encode(x), repeat)
    t_dec, y = _best(lambda: codec.decode(payload), repeat)
    return _row(f"dpr {fmt}", x, codec.payload_nbytes(payload), t_enc, t_dec, y)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| tensor | shape | rate | method | ratio | max err | RMS err | RMS / max\\|x\\| | enc MB/s | dec MB/s |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['tensor']} | {'x'.join(map(str, r['shape']))} | {r['rate']} | {r['method']} | "
                     f"{r['ratio']:.2f} | {r['max_err']:.3g} | {r['rms_err']:.3g} | {r['rel_rms']:.2e} | "
                     f"{r['enc_MBps']:.1f} | {r['dec_MBps']:.1f} |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> str:
    """Per rate and method: median ratio, median RMS error relative to max |x|, median MB/s over tensors."""
    lines = ["| rate | method | tensors | median ratio | median RMS / max\\|x\\| | median enc MB/s | median dec MB/s |",
             "|" + "---|" * 7]
    for rate in sorted({r["rate"] for r in rows}):
        for method in dict.fromkeys(r["method"] for r in rows):
            sel = [r for r in rows if r["rate"] == rate and r["method"] == method]
            if not sel:
                continue
            med = lambda k: float(np.median([r[k] for r in sel]))  # noqa: E731
            lines.append(f"| {rate} | {method} | {len(sel)} | {med('ratio'):.2f} | {med('rel_rms'):.2e} | "
                         f"{med('enc_MBps'):.1f} | {med('dec_MBps'):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/onnxcomp_activations"))
    ap.add_argument("--rates", type=int, nargs="+", default=[4, 8, 12, 16])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--min-mib", type=float, default=0.25, help="skip tensors smaller than this")
    ap.add_argument("--numpy", action="store_true", help="also time the vectorised NumPy coder (slow)")
    ap.add_argument("--out", type=Path, default=None, help="write bench.json + tables.md here")
    args = ap.parse_args(argv)
    try:
        import zfpy  # noqa: F401
        have_zfpy = True
    except ImportError:
        print("zfpy not installed (pip install -e '.[bench]'): benchmarking onnxcomp zfp alone")
        have_zfpy = False

    rows: list[dict[str, Any]] = []
    for path, x, meta in distinct_activations(args.dir, args.min_mib):
        for rate in args.rates:
            results = [bench_ours(x, rate, args.repeat, numba=True)]
            if args.numpy and zfp.USE_NUMBA:
                results.append(bench_ours(x, rate, 1, numba=False))
            if have_zfpy:
                results += [bench_zfpy(x, rate, args.repeat, two_d=True), bench_zfpy(x, rate, args.repeat, two_d=False)]
            results += [r for r in [bench_dpr(x, rate, args.repeat)] if r is not None]
            rows += [{**meta, "rate": rate, **r} for r in results]
        print(f"done {path.name} ({meta['mib']:.1f} MiB)", flush=True)

    summ, table = summary(rows), markdown_table(rows)
    print(summ)
    print(table)
    if args.out:
        write_results(args.out, args, {"rows": rows},
                      "## Summary (medians over tensors)\n\n" + summ + "\n## Every tensor\n\n" + table,
                      env={"numba_coder": zfp.USE_NUMBA}, package="zfpy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
