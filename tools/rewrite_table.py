"""Before/after table of two onnxcomp builds from tools/bench_rewrite.sh outputs (and time_transform.py logs).

usage: python tools/rewrite_table.py WORKDIR MODEL TAG_A TAG_B [--timing LOG ...]

Per policy: losses bit-identical (the measure JSONs' loss lists compared exactly), the graphs node for node
(tools/compare_graphs.py), measured peaks of both, and the interleaved transform times and analysis counts
found in time_transform.py logs (their final JSON lines). Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_graphs import compare  # noqa: E402

POLICIES = ("baseline", "lossless", "lossless-encode", "recompute", "rows", "reorder", "dpr-fp16", "dpr-bf16",
            "dpr-fp10", "dpr-fp8", "comet", "zfp-4", "zfp-6", "zfp-8", "zfp-12", "zfp-16")


def _measure(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _timings(logs: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for log in logs:
        for line in Path(log).read_text().splitlines():
            if line.startswith("{"):
                out.update(json.loads(line))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir"), ap.add_argument("model"), ap.add_argument("tag_a"), ap.add_argument("tag_b")
    ap.add_argument("--timing", nargs="*", default=[])
    args = ap.parse_args(argv)
    base = Path(args.workdir) / args.model
    timing = _timings(args.timing)
    print(f"| policy | losses bit-identical | graph node for node | peak {args.tag_a} (MiB) | peak {args.tag_b} (MiB) "
          f"| Δ peak | transform {args.tag_a} / {args.tag_b} (s) | analyses {args.tag_a} / {args.tag_b} |")
    print("|---|---|---|---|---|---|---|---|")
    for p in POLICIES:
        a, b = _measure(base / args.tag_a / f"{p}.measure.json"), _measure(base / args.tag_b / f"{p}.measure.json")
        if a is None and b is None:
            continue
        same_losses = "not measured" if a is None or b is None else ("yes" if a["losses"] == b["losses"] else "NO")
        if p == "baseline":
            graph = "same input"
        elif (base / args.tag_a / f"{p}.onnx").exists() and (base / args.tag_b / f"{p}.onnx").exists():
            problem = compare(str(base / args.tag_a / f"{p}.onnx"), str(base / args.tag_b / f"{p}.onnx"))
            graph = "same" if problem is None else f"DIFFERENT ({problem})"
        else:
            graph = "–"
        pa = a["peak_bytes"] / 2**20 if a else None
        pb = b["peak_bytes"] / 2**20 if b else None
        delta = f"{(pb - pa) / pa * 100:+.1f} %" if pa and pb else "–"
        t = timing.get(p)
        times = f"{t['a_s']:.2f} / {t['b_s']:.2f}" if t else "–"
        counts = f"{t['analyses_a']} / {t['analyses_b']}" if t and "analyses_a" in t else "–"
        fmt = lambda v: f"{v:.1f}" if v is not None else "–"  # noqa: E731
        print(f"| {p} | {same_losses} | {graph} | {fmt(pa)} | {fmt(pb)} | {delta} | {times} | {counts} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
