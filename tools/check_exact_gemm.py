"""Check passes/exact_gemm.py's rule against the ORT build installed here: per shape, block count and intra-op
thread count, the rule's verdict next to the number of elements where the split Gemms differ from the whole
one (forward: per-block Gemm + Concat; dX: the chain Gemm(dY_j, W_j, C=previous, beta=1)). A line marked
VIOLATION means the rule called a split exact that is not: the exact split must not be trusted on this build.

    .venv/bin/python tools/check_exact_gemm.py                       # VGG-16's fc1/fc2 and a few small shapes
    .venv/bin/python tools/check_exact_gemm.py --shape 32 25088 4096 --threads 1 2 4
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from onnxcomp.passes.exact_gemm import probe_session, split_probe_graphs

SHAPES = [(32, 25088, 4096), (32, 4096, 4096), (8, 512, 1000), (4, 256, 512), (16, 3000, 700), (2, 200, 640),
          (64, 1024, 1024)]


def main(argv: list[str] | None = None) -> int:
    from onnx import helper

    from onnxcomp.passes.exact_gemm import aligned_bounds, chunks_by_128

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", nargs=3, type=int, action="append", metavar=("BATCH", "IN", "OUT"),
                    help="an fc layer: batch, in-features, out-features (repeatable)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--parts", nargs="+", type=int, default=[2, 3, 4, 8])
    args = ap.parse_args(argv)
    rng = np.random.default_rng(3)
    violations = 0
    for batch, cols, rows in args.shape or SHAPES:
        x, w = rng.standard_normal((batch, cols), np.float32), rng.standard_normal((rows, cols), np.float32)
        dy = rng.standard_normal((batch, rows), np.float32)
        for t in args.threads:
            whole_fwd = probe_session([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], [], {"x": x, "w": w},
                                 t).run(None, {"x": x, "w": w})[0]
            whole_dx = probe_session([helper.make_node("Gemm", ["dy", "w"], ["y"])], [], {"dy": dy, "w": w},
                                t).run(None, {"dy": dy, "w": w})[0]
            for p in args.parts:
                bounds = aligned_bounds(rows, p)
                if bounds is None:
                    continue
                sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
                says = chunks_by_128(batch, rows, cols, t) and chunks_by_128(batch, cols, rows, t) and all(
                    chunks_by_128(batch, s, cols, t) and chunks_by_128(batch, cols, s, t) for s in sizes)
                (fwd, fi), (dxn, di) = split_probe_graphs(bounds)
                f = probe_session(fwd, fi, {"x": x, "w": w}, t).run(None, {"x": x, "w": w})[0]
                d = probe_session(dxn, di, {"dy": dy, "w": w}, t).run(None, {"dy": dy, "w": w})[0]
                fm, dm = int(np.count_nonzero(f != whole_fwd)), int(np.count_nonzero(d != whole_dx))
                bad = says and (fm or dm)
                violations += bool(bad)
                print(f"batch={batch} in={cols} out={rows} threads={t} bounds={bounds}: rule says exact={says}; "
                      f"differing elements: forward {fm}, dX {dm}{'  VIOLATION' if bad else ''}", flush=True)
    print(f"{violations} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
