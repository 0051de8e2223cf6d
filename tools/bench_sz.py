"""Benchmark the ``sz`` codec on dumped activations against SZ3 (PyPI ``pysz``) and plain zstd.

For every ``.npy`` in ``--dir`` (written by tools/dump_activations.py) and every error bound — relative to
the tensor's value range (``--rel``, eb = r·(max − min)) and absolute (``--abs``) — it measures compression
ratio (raw float32 bytes / payload bytes), encode and decode MB/s (of raw float32 bytes, best of
``--repeat``, one thread) and the max abs error, and checks max error ≤ eb for every lossy method:

* ``sz``        our codec, NumPy backend (fixed-length blocks)
* ``sz+zstd``   the same with ``zstd_level`` (zstd frames over the rate bytes and the block data)
* ``sz+huff*``  an estimate, not a coder: order-0 entropy of the same Lorenzo deltas + outliers, i.e. the
                best a Huffman coder of the quantization codes (cuSZ/SZ3 style) could reach in place of
                the fixed-length blocks; no speed
* ``SZ3``       pysz (SZ3 1.x, ABS mode, default predictor = interpolation + Lorenzo, Huffman + zstd)
* ``zstd``      zstd level 3 on the raw float32 bytes (lossless)

Writes ``<out>/bench.json`` (every row) and ``<out>/tables.md`` (summary + per-tensor tables), and prints the tables.

    .venv/bin/python tools/bench_sz.py --dir /tmp/onnxcomp_activations --out docs/sz
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

import onnxcomp.custom_ops.sz as sz
from onnxcomp.custom_ops import get_codec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from activation_bench import best_time as _best, distinct_activations, write_results  # noqa: E402

SZ = get_codec("sz")


def _max_err(x: np.ndarray, y: np.ndarray) -> float:
    fin = np.isfinite(x)
    return float(np.abs(x[fin].astype(np.float64) - y[fin].astype(np.float64)).max()) if fin.any() else 0.0


def _row(method: str, x: np.ndarray, nbytes: int, t_enc: float | None, t_dec: float | None,
         err: float | None, eb: float | None) -> dict[str, Any]:
    mb = x.nbytes / 1e6
    return {"method": method, "ratio": x.nbytes / nbytes, "bytes": int(nbytes),
            "enc_MBps": mb / t_enc if t_enc else None, "dec_MBps": mb / t_dec if t_dec else None,
            "max_err": err, "eb": eb, "bound_ok": None if eb is None or err is None else bool(err <= eb)}


def bench_sz(x: np.ndarray, eb: float, repeat: int, zstd_level: int) -> list[dict[str, Any]]:
    rows = []
    for method, params in (("sz", {}), (f"sz+zstd{zstd_level}", {"zstd_level": zstd_level})):
        t_enc, payload = _best(lambda: SZ.encode(x, eb=eb, **params), repeat)
        t_dec, y = _best(lambda: SZ.decode(payload), repeat)
        rows.append(_row(method, x, SZ.payload_nbytes(payload), t_enc, t_dec, _max_err(x, y), eb))
    # Entropy estimate of coding the Lorenzo deltas with Huffman instead of fixed-length blocks.
    flat = x.reshape(-1)
    q, outlier = sz._quantize_cpu(flat, eb)
    mag, neg = sz._deltas_cpu(q, flat.size)
    d = np.where(neg, -mag.view(np.int32), mag.view(np.int32)).reshape(-1)
    _, counts = np.unique(d, return_counts=True)
    p = counts / counts.sum()
    bits = float(-(p * np.log2(p)).sum()) * d.size
    est = int(bits / 8) + 12 * int(outlier.sum()) + sz.HEADER_BYTES
    rows.append(_row("sz+huff*", x, max(est, 1), None, None, None, None))
    return rows


def bench_sz3(x: np.ndarray, eb: float, repeat: int) -> dict[str, Any]:
    import pysz

    shape = x.shape
    if x.ndim == 4:  # feature maps: N*C independent H x W fields; degenerate 1x1 maps as one 1-D signal
        shape = (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]) if x.shape[2] * x.shape[3] > 1 else (x.size,)
    xs = np.ascontiguousarray(x.reshape(shape))
    cfg = pysz.szConfig()
    cfg.errorBoundMode = pysz.szErrorBoundMode.ABS
    cfg.absErrorBound = eb
    t_enc, (comp, _) = _best(lambda: pysz.sz.compress(xs, cfg), repeat)
    t_dec, (y, _) = _best(lambda: pysz.sz.decompress(comp, np.float32, shape), repeat)
    return _row("SZ3", x, comp.nbytes, t_enc, t_dec, _max_err(xs, y), eb)


def bench_zstd(x: np.ndarray, repeat: int, level: int = 3) -> dict[str, Any]:
    raw = x.tobytes()
    t_enc, comp = _best(lambda: zstandard.ZstdCompressor(level=level).compress(raw), repeat)
    t_dec, back = _best(lambda: zstandard.ZstdDecompressor().decompress(comp), repeat)
    assert back == raw
    return _row(f"zstd{level} (lossless)", x, len(comp), t_enc, t_dec, 0.0, None)


def _fmt(v: Any, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = ("| tensor | shape | MiB | density | eb spec | eb | method | ratio | enc MB/s | dec MB/s | max err "
            "| ≤ eb |\n")
    head += "|---|---|---:|---:|---|---:|---|---:|---:|---:|---:|---|\n"
    lines = []
    for r in rows:
        ok = "–" if r["bound_ok"] is None else ("yes" if r["bound_ok"] else "**NO**")
        shape = "×".join(map(str, r["shape"]))
        lines.append(f"| {r['tensor']} | {shape} | {r['mib']:.1f} | {r['density']:.2f} | "
                     f"{r['eb_spec']} | {r['eb_used']:.3g} | {r['method']} | {r['ratio']:.2f} | "
                     f"{_fmt(r['enc_MBps'], '.0f')} | {_fmt(r['dec_MBps'], '.0f')} | "
                     f"{_fmt(r['max_err'], '.3g')} | {ok} |")
    return head + "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Per (eb spec, method): geometric-mean ratio and size-weighted MB/s over all tensors."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["eb_spec"], r["method"]), []).append(r)
    out = {}
    text = "| eb spec | method | tensors | geo-mean ratio | total ratio | enc MB/s | dec MB/s | all ≤ eb |\n"
    text += "|---|---|---:|---:|---:|---:|---:|---|\n"
    for (spec, method), rs in groups.items():
        raw = sum(r["mib"] for r in rs) * 2**20
        comp = sum(r["bytes"] for r in rs)
        geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in rs])))
        mb = raw / 1e6
        enc = mb / sum(r["mib"] * 2**20 / 1e6 / r["enc_MBps"] for r in rs) if rs[0]["enc_MBps"] else None
        dec = mb / sum(r["mib"] * 2**20 / 1e6 / r["dec_MBps"] for r in rs) if rs[0]["dec_MBps"] else None
        oks = [r["bound_ok"] for r in rs if r["bound_ok"] is not None]
        ok = "–" if not oks else ("yes" if all(oks) else "**NO**")
        out[f"{spec}|{method}"] = {"geo_ratio": geo, "total_ratio": raw / comp, "enc_MBps": enc, "dec_MBps": dec,
                                   "bound_ok": all(oks) if oks else None}
        text += (f"| {spec} | {method} | {len(rs)} | {geo:.2f} | {raw / comp:.2f} | {_fmt(enc, '.0f')} | "
                 f"{_fmt(dec, '.0f')} | {ok} |\n")
    return text, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/onnxcomp_activations"))
    ap.add_argument("--rel", type=float, nargs="*", default=[1e-2, 1e-3, 1e-4])
    ap.add_argument("--abs", type=float, nargs="*", default=[1e-2, 1e-3])
    ap.add_argument("--zstd-level", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--min-mib", type=float, default=0.25, help="skip tensors smaller than this")
    ap.add_argument("--out", type=Path, default=None, help="write bench.json + README.md here (e.g. docs/sz)")
    args = ap.parse_args(argv)

    rows: list[dict[str, Any]] = []
    for path, x, meta in distinct_activations(args.dir, args.min_mib, say_skipped=True):
        lo, hi = float(x.min()), float(x.max())
        meta["range"] = hi - lo
        z = bench_zstd(x, args.repeat)
        specs = [(f"rel {r:g}", r * (hi - lo)) for r in args.rel] + [(f"abs {a:g}", a) for a in args.abs]
        for spec, eb in specs:
            if not eb > 0:
                continue
            for r in [*bench_sz(x, eb, args.repeat, args.zstd_level), bench_sz3(x, eb, args.repeat), z]:
                rows.append({**meta, "eb_spec": spec, "eb_used": eb, **r})
        print(f"done {path.name} ({meta['mib']:.1f} MiB)", flush=True)

    table = markdown_table(rows)
    summ_text, summ = summary(rows)
    print(summ_text)
    print(table)
    bad = [r for r in rows if r["bound_ok"] is False]
    if args.out:
        write_results(args.out, args, {"summary": summ, "rows": rows},
                      "## Summary\n\n" + summ_text + "\n## Every tensor\n\n" + table,
                      env={"zstandard": zstandard.__version__}, package="pysz")
    if bad:
        print(f"BOUND VIOLATED in {len(bad)} rows")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
