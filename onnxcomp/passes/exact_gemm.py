"""When a Gemm split into row blocks of its weight is bit-identical to the whole Gemm under ORT's CPU SGEMM.

MLAS (``onnxruntime/core/mlas/lib/sgemm.cpp``, ``MlasSgemmOperation``) walks the reduction dimension K in
chunks of ``StrideK`` (``MLAS_SGEMM_STRIDEK`` = 128) per panel of N columns: the kernel sums one chunk in
registers, then adds it into C (``C = acc`` for the first chunk when beta = 0, else ``C += acc``). So for
every output element, the whole Gemm computes ((acc_0 + acc_1) + acc_2) + … over 128-wide chunks, and

    Gemm(A[:, 0:b1], B[0:b1]) → Gemm(A[:, b1:b2], B[b1:b2], C=that, beta=1) → …

with every b_j a multiple of 128 adds the very same chunk sums in the very same order: bit-identical. (A
running sum of Adds is not: it adds a block's chunks together before adding them to the rest.) Splitting
the *output* columns (the forward's per-block Gemms, the per-block weight gradients) leaves each element's
reduction alone.

What can break it, all read from that file and checked on ORT 1.19.2 (docs/notes/exactsplit.md):
- StrideK is not always 128: for N ≥ K it halves while StrideK/2 ≥ K; for N < K (A not transposed) it
  doubles while StrideN (128) > 16 and StrideN/2 ≥ N. N here is the width of one thread's slice:
  ``MlasGemmBatch`` cuts N (when N > M) into ``threads`` slices of whole 16-column units, with threads =
  min(intra-op threads, M·N·K/65536 + 1, units). A block's slices are narrower than the whole Gemm's, so the
  chunking can differ at high thread counts: the rule below demands StrideK = 128 for every slice of every
  call at every thread count up to ``max_threads`` (ORT's degree of parallelism is its intra-op thread
  count; on hybrid CPUs ORT multiplies it by 4).
- M = 1 (and N = 1) take MLAS's single-row kernels, which sum the whole K at once: never split there.
"""
from __future__ import annotations

STRIDE_K = 128            # MLAS_SGEMM_STRIDEK
STRIDE_N = 128            # MLAS_SGEMM_STRIDEN
THREAD_ALIGN_N = 16       # MLAS_SGEMM_STRIDEN_THREAD_ALIGN
THREAD_COMPLEXITY = 64 * 1024   # MLAS_SGEMM_THREAD_COMPLEXITY
# Intra-op thread counts the exact split is guaranteed for (ORT's default is the number of physical cores).
DEFAULT_MAX_THREADS = 16


def stride_k(n: int, k: int, trans_a: bool = False) -> int:
    """MLAS's reduction chunk for one thread's slice of ``n`` output columns and reduction ``k``."""
    s_n, s_k = STRIDE_N, STRIDE_K
    if n >= k:
        while s_k // 2 >= k:
            s_n, s_k = s_n * 2, s_k // 2
    elif not trans_a:
        while s_n > 16 and s_n // 2 >= n:
            s_n, s_k = s_n // 2, s_k * 2
    return s_k


def slice_widths(m: int, n: int, k: int, threads: int) -> list[int]:
    """Output-column widths of the threads' slices of an M×N×K SGEMM (N when MLAS cuts along M instead)."""
    t = min(threads, int(m * n * k / THREAD_COMPLEXITY) + 1)
    if n <= m:
        return [n]
    units = -(-n // THREAD_ALIGN_N)
    t = min(t, units)
    per, extra = divmod(units, t)
    widths, start = [], 0
    for i in range(t):
        count = (per + (i < extra)) * THREAD_ALIGN_N
        widths.append(min(count, n - start))
        start += count
    return widths


def chunks_by_128(m: int, n: int, k: int, max_threads: int) -> bool:
    """Every thread slice of this Gemm, at every thread count up to ``max_threads``, sums K in 128-chunks
    from its start (or in one chunk, when K ≤ 128 and that is all there is)."""
    if m < 2 or n < 2:
        return False
    for t in range(1, max_threads + 1):
        for w in slice_widths(m, n, k, t):
            s = stride_k(w, k)
            if s != STRIDE_K and not k <= min(s, STRIDE_K):
                return False
    return True


def aligned_bounds(rows: int, parts: int) -> tuple[int, ...] | None:
    """``parts`` row blocks as even as the 128-row grid allows (None: fewer than ``parts`` grid cells)."""
    units = -(-rows // STRIDE_K)
    if units < parts:
        return None
    per, extra = divmod(units, parts)
    bounds = [0]
    for j in range(parts):
        bounds.append(min(rows, bounds[-1] + (per + (j < extra)) * STRIDE_K))
    return tuple(bounds)


def exact_row_bounds(rows: int, cols: int, batch: int | None, parts: int,
                     max_threads: int = DEFAULT_MAX_THREADS) -> tuple[int, ...] | str:
    """Row bounds of a bit-identical split of a ``rows``×``cols`` fc weight (forward ``Gemm(X, W, transB=1)``,
    dX ``Gemm(dY, W)``) into at most ``parts`` blocks, the most blocks first; or why there is none."""
    if batch is None or batch < 2:
        return "its batch is not a static size ≥ 2 (batch 1 runs MLAS's single-row kernel)"
    if not (chunks_by_128(batch, rows, cols, max_threads) and chunks_by_128(batch, cols, rows, max_threads)):
        return f"its whole Gemms do not sum in 128-wide chunks at every thread count up to {max_threads}"
    for p in range(parts, 1, -1):
        bounds = aligned_bounds(rows, p)
        if bounds is None:
            continue
        sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
        if all(chunks_by_128(batch, s, cols, max_threads) and chunks_by_128(batch, cols, s, max_threads)
               for s in sizes):
            return bounds
    return (f"no split on MLAS's 128-row grid keeps every block's Gemms summing in 128-wide chunks at "
            f"every thread count up to {max_threads}")


# Probe graphs for checking the rule against an ORT build (tools/check_exact_gemm.py, the tests).
def probe_session(nodes: list, inits: list, feeds: dict, threads: int):  # noqa: ANN201
    """An ORT session on a probe graph (inputs ``feeds``, output ``y``) with ``threads`` intra-op threads."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def split_probe_graphs(bounds: tuple[int, ...]) -> tuple[tuple[list, list], tuple[list, list]]:
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
