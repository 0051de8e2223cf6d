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

SHAPES = [(32, 25088, 4096), (32, 4096, 4096), (8, 512, 1000), (4, 256, 512), (16, 3000, 700), (2, 200, 640),
          (64, 1024, 1024)]


def _session(nodes: list, inits: list, feeds: dict[str, np.ndarray], threads: int):  # noqa: ANN202
    import onnxruntime as ort
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def split_graphs(bounds: tuple[int, ...]) -> tuple[tuple[list, list], tuple[list, list]]:
    """(nodes, initializers) of the split forward and of the split dX chain."""
    from onnx import TensorProto, helper

    inits = [helper.make_tensor(f"b{j}", TensorProto.INT64, [1], [v]) for j, v in enumerate(bounds)]
    inits += [helper.make_tensor("ax0", TensorProto.INT64, [1], [0]), helper.make_tensor("ax1", TensorProto.INT64, [1], [1])]
    fwd, dx, outs, running = [], [], [], None
    for j in range(len(bounds) - 1):
        fwd += [helper.make_node("Slice", ["w", f"b{j}", f"b{j + 1}", "ax0"], [f"w{j}"], name=f"fs{j}"),
                helper.make_node("Gemm", ["x", f"w{j}"], [f"y{j}"], transB=1, name=f"fg{j}")]
        outs.append(f"y{j}")
        out = "y" if j == len(bounds) - 2 else f"r{j}"
        dx += [helper.make_node("Slice", ["dy", f"b{j}", f"b{j + 1}", "ax1"], [f"d{j}"], name=f"ds{j}"),
               helper.make_node("Slice", ["w", f"b{j}", f"b{j + 1}", "ax0"], [f"v{j}"], name=f"dw{j}"),
               helper.make_node("Gemm", [f"d{j}", f"v{j}"] + ([running] if running else []), [out], beta=1.0,
                                name=f"dg{j}")]
        running = out
    fwd.append(helper.make_node("Concat", outs, ["y"], axis=1, name="cat"))
    return (fwd, inits), (dx, inits)


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
            whole_fwd = _session([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], [], {"x": x, "w": w},
                                 t).run(None, {"x": x, "w": w})[0]
            whole_dx = _session([helper.make_node("Gemm", ["dy", "w"], ["y"])], [], {"dy": dy, "w": w},
                                t).run(None, {"dy": dy, "w": w})[0]
            for p in args.parts:
                bounds = aligned_bounds(rows, p)
                if bounds is None:
                    continue
                sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
                says = chunks_by_128(batch, rows, cols, t) and chunks_by_128(batch, cols, rows, t) and all(
                    chunks_by_128(batch, s, cols, t) and chunks_by_128(batch, cols, s, t) for s in sizes)
                (fwd, fi), (dxn, di) = split_graphs(bounds)
                f = _session(fwd, fi, {"x": x, "w": w}, t).run(None, {"x": x, "w": w})[0]
                d = _session(dxn, di, {"dy": dy, "w": w}, t).run(None, {"dy": dy, "w": w})[0]
                fm, dm = int(np.count_nonzero(f != whole_fwd)), int(np.count_nonzero(d != whole_dx))
                bad = says and (fm or dm)
                violations += bool(bad)
                print(f"batch={batch} in={cols} out={rows} threads={t} bounds={bounds}: rule says exact={says}; "
                      f"differing elements: forward {fm}, dX {dm}{'  VIOLATION' if bad else ''}", flush=True)
    print(f"{violations} violation(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
