"""Would a ConvGrad split into input-channel blocks be bit-identical on this ORT build? A rule read from
passes/exact_gemm.py's model of MLAS's SGEMM, next to a probe on ORT's CPU kernels.

ORT 1.19's ConvGrad computes, per image, dW += dY_n · colᵀ (an SGEMM with M = C_out, N = C_in·kh·kw,
K = H_out·W_out, beta = 1) and dX = col2im(Wᵀ · dY_n) (M = C_in·kh·kw, N = H_out·W_out, K = C_out, A
transposed). A block of input channels narrows dW's N and dX's M: every element is the same reduction, but
MLAS picks its K-chunk per thread slice of N (``exact_gemm.stride_k``/``slice_widths``), so a narrower block can
sum K in other chunks. The rule: at every intra-op thread count up to T, every output column of every block
gets the whole Gemm's chunk. Each line prints the rule's verdict and the probe's differing elements (dX, dW)
at exactly T threads; VIOLATION = the rule called a split exact that is not.

Why it was written (NOTES-suitemed.md): an input-channel split shrinks ConvGrad's one-image im2col scratch,
which ORT allocates outside its memory pattern; on densenet_s that request is what makes the arena hold the
pattern block twice under ORT's defaults. Measured on the suite's shapes the rule (and the probe) allow few
exact splits: none at T = 16, 2 blocks at most for densenet_s's large ones at T = 2.

    .venv/bin/python tools/check_exact_conv_grad.py
    .venv/bin/python tools/check_exact_conv_grad.py --case 8 192 32 20 3 1 1 --threads 1 2 4 --parts 2 4
"""
from __future__ import annotations

import argparse

import numpy as np

from onnxcomp.passes.base import even_bounds
from onnxcomp.passes.exact_gemm import slice_widths, stride_k

# (batch, C_in, C_out, H=W, kernel, pad, stride): suite shapes (leaky_vgg, densenet_s) and a stem conv.
CASES = [(16, 128, 256, 14, 3, 1, 1), (8, 3, 16, 40, 3, 1, 1), (8, 192, 32, 20, 3, 1, 1), (8, 128, 32, 20, 1, 0, 1),
         (16, 64, 128, 28, 3, 1, 1), (8, 96, 32, 20, 3, 1, 1)]


def column_chunks(m: int, n: int, k: int, threads: int, trans_a: bool) -> list[int]:
    """The K-chunk MLAS uses for each of the N output columns of an M×N×K SGEMM (K itself: one chunk)."""
    out: list[int] = []
    for w in slice_widths(m, n, k, threads):
        s = stride_k(w, k, trans_a)
        out += [k if s >= k else s] * w
    return out


def split_is_exact(c_out: int, bounds: list[int], kk: int, howo: int, max_threads: int) -> bool:
    """The rule: dW's columns and dX's columns keep the whole op's K-chunks in every block, at every thread
    count up to ``max_threads``."""
    c_in = bounds[-1]
    for t in range(1, max_threads + 1):
        parts: list[int] = []
        for lo, hi in zip(bounds, bounds[1:]):
            parts += column_chunks(c_out, (hi - lo) * kk, howo, t, False)
            if column_chunks((hi - lo) * kk, howo, c_out, t, True) != column_chunks(c_in * kk, howo, c_out, t, True):
                return False
        if parts != column_chunks(c_out, c_in * kk, howo, t, False):
            return False
    return True


def _probe(case: tuple[int, ...], bounds: list[int], threads: int) -> tuple[int, int]:
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h

    n, c, m, hw, k, pad, stride = case
    ho = (hw + 2 * pad - k) // stride + 1
    attrs = dict(kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2, dilations=[1, 1], group=1,
                 domain="com.microsoft")
    nodes = [h.make_node("ConvGrad", ["dY", "X", "W"], ["dX", "dW", "dB"], **attrs)]
    inits = [h.make_tensor("ax", T.INT64, [1], [1])]
    dxs, dws = [], []
    for j, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        inits += [h.make_tensor(f"lo{j}", T.INT64, [1], [lo]), h.make_tensor(f"hi{j}", T.INT64, [1], [hi])]
        nodes += [h.make_node("Slice", ["X", f"lo{j}", f"hi{j}", "ax"], [f"x{j}"]),
                  h.make_node("Slice", ["W", f"lo{j}", f"hi{j}", "ax"], [f"w{j}"]),
                  h.make_node("ConvGrad", ["dY", f"x{j}", f"w{j}"], [f"dx{j}", f"dw{j}"], **attrs)]
        dxs.append(f"dx{j}")
        dws.append(f"dw{j}")
    nodes += [h.make_node("Concat", dxs, ["sdX"], axis=1), h.make_node("Concat", dws, ["sdW"], axis=1)]
    shapes = {"dY": [n, m, ho, ho], "X": [n, c, hw, hw], "W": [m, c, k, k]}
    graph = h.make_graph(nodes, "probe", [h.make_tensor_value_info(a, T.FLOAT, s) for a, s in shapes.items()],
                         [h.make_tensor_value_info(o, T.FLOAT, None) for o in ["dX", "dW", "sdX", "sdW"]], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)],
                         ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    # Slice → Split fusion names two nodes alike on this graph; the kernels under test are the same either way.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {a: rng.standard_normal(s, dtype=np.float32) for a, s in shapes.items()}
    dx, dw, sdx, sdw = sess.run(None, feeds)
    return int((dx.view(np.int32) != sdx.view(np.int32)).sum()), int((dw.view(np.int32) != sdw.view(np.int32)).sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", nargs=7, type=int, action="append",
                    metavar=("BATCH", "C_IN", "C_OUT", "HW", "K", "PAD", "STRIDE"))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--parts", nargs="+", type=int, default=[2, 3, 4])
    args = ap.parse_args(argv)
    violations = 0
    for case in [tuple(c) for c in args.case] if args.case else CASES:
        n, c, m, hw, k, pad, stride = case
        ho = (hw + 2 * pad - k) // stride + 1
        for parts in args.parts:
            bounds = even_bounds(c, parts)
            for t in args.threads:
                exact = split_is_exact(m, bounds, k * k, ho * ho, t)
                diff = _probe(case, bounds, t)
                bad = exact and diff != (0, 0)
                violations += bad
                print(f"{case} {parts} blocks, threads {t}: rule {'exact' if exact else 'not exact'} (≤ {t} "
                      f"threads), differing dX/dW elements {diff}{'  VIOLATION' if bad else ''}", flush=True)
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
