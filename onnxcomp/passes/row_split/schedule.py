"""Row-block schedules: OverL windows, 2PS kept rows, predicted block bytes, checkpoint segments."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base import even_bounds
from .geometry import Layer


def _internal_stash_bytes(layers: list[Layer], i: int, j: int) -> int:
    """Bytes the original graph stashes inside layers[i:j] that a segment [i, j) recomputes instead."""
    total = 0
    for t in range(i + 1, j):          # T_t for t = i+1..j-1 is stashed when a backward op reads it
        lo, hi = layers[t - 1], layers[t]
        if lo.grad_reads_y or hi.kind == "Conv" or (hi.kind in ("Relu", "LeakyRelu") and not hi.grad_reads_y):
            total += lo.row_bytes("y") * lo.h_out
    for t in range(i, j):
        lay = layers[t]
        if lay.kind == "MaxPool":
            total += lay.row_bytes("y") * lay.h_out * 2   # int64 indices
    return total


# ------------------------------------------------------------------------------------------- row schedules

def _overl_windows(layers: list[Layer], a: int, b: int) -> list[tuple[int, int]]:
    """Row ranges [T_0 .. T_k] one OverL block touches for output rows [a, b)."""
    ranges = [(0, 0)] * (len(layers) + 1)
    ranges[-1] = (a, b)
    for li in range(len(layers) - 1, -1, -1):
        ranges[li] = layers[li].need(*ranges[li + 1])
    return ranges


@dataclass
class _TwoPS:
    """Static row bookkeeping of 2PS: U[j][r] rows of T_j computed after block r (forward), C[j][r] rows
    of dL/dT_j complete after block r (backward), keep[j][r] first row of T_j kept for later blocks."""
    U: list[list[int]]
    C: list[list[int]]
    keep: list[list[int]]


def _twops_plan(layers: list[Layer], R: int) -> _TwoPS:
    k = len(layers)
    H = [layers[0].h_in] + [lay.h_out for lay in layers]
    U = [[0] * (R + 1) for _ in range(k + 1)]
    C = [[0] * (R + 1) for _ in range(k + 1)]
    U[k] = even_bounds(H[k], R)
    C[k] = list(U[k])
    for j in range(k - 1, -1, -1):
        lay = layers[j]
        for r in range(1, R + 1):
            U[j][r] = H[j] if r == R else lay.need(0, U[j + 1][r])[1]
            C[j][r] = H[j] if r == R else min(lay.need(C[j + 1][r], H[j + 1])[0], U[j][r])
    # keep[j][r]: smallest row of T_j that a block after r still reads.
    starts: list[list[int]] = [[10 ** 12] * (R + 2) for _ in range(k + 1)]
    for j in range(1, k + 1):
        for r in range(1, R + 1):
            s = 10 ** 12
            if j < k and U[j + 1][r] > U[j + 1][r - 1]:
                s = min(s, layers[j].need(U[j + 1][r - 1], U[j + 1][r])[0])
            if j < k and C[j + 1][r] > C[j + 1][r - 1]:
                s = min(s, layers[j].need(C[j + 1][r - 1], C[j + 1][r])[0])
            if _reads_y(layers[j - 1]) and C[j][r] > C[j][r - 1]:
                s = min(s, C[j][r - 1])
            starts[j][r] = s
    keep = [[10 ** 12] * (R + 1) for _ in range(k + 1)]
    for j in range(1, k + 1):
        for r in range(R - 1, -1, -1):
            keep[j][r] = min(keep[j][r + 1] if r + 1 < R else 10 ** 12, starts[j][r + 1])
    return _TwoPS(U, C, keep)


def _reads_y(lay: Layer) -> bool:
    return lay.grad_reads_y


def _block_bytes(layers: list[Layer], R: int, variant: str) -> int:
    """Predicted live bytes of the largest block (recomputed rows of every layer + indices + two gradient
    windows in flight): the cost model behind checkpoints='auto'."""
    R = max(1, min(R, layers[-1].h_out))
    row = [layers[0].row_bytes("x")] + [lay.row_bytes("y") for lay in layers]
    extra = [0] + [lay.row_bytes("y") * 2 if lay.kind == "MaxPool" else 0 for lay in layers]
    best = 0
    if variant == "overl":
        sp = even_bounds(layers[-1].h_out, R)
        for r in range(1, R + 1):
            w = _overl_windows(layers, sp[r - 1], sp[r])
            rows = [b - a for a, b in w]
            live = sum(n * (row[j] + extra[j]) for j, n in enumerate(rows)) + 2 * max(n * row[j] for j, n in enumerate(rows))
            ws = max(lay.ws_row_bytes * rows[j + 1] for j, lay in enumerate(layers))
            best = max(best, live + ws)
        return best
    plan = _twops_plan(layers, R)
    for r in range(1, R + 1):
        ia, ib = layers[0].need(plan.U[1][r - 1], plan.U[1][r]) if plan.U[1][r] > plan.U[1][r - 1] else (0, 0)
        live = (ib - ia) * row[0]
        grad = 0
        for j in range(1, len(layers) + 1):
            lo = min(plan.keep[j][r - 1], plan.U[j][r - 1])
            live += (plan.U[j][r] - lo) * (row[j] + extra[j])
        for j in range(len(layers) + 1):
            halo = layers[j - 1].k if j > 0 else 1
            grad = max(grad, (plan.C[j][r] - plan.C[j][r - 1] + halo) * row[j])
        ws = max(lay.ws_row_bytes * (plan.C[j + 1][r] - plan.C[j + 1][r - 1]) for j, lay in enumerate(layers))
        best = max(best, live + 2 * grad + ws)
    return best


def _choose_segments(layers: list[Layer], R: int, variant: str, checkpoints: int | str) -> list[tuple[int, int]]:
    """Cut layers into segments [i, j). auto: minimise max block bytes + checkpoint bytes (fewest cuts on
    ties); N: the best cut into exactly N segments under the same objective."""
    k = len(layers)
    ck = [0] + [layers[i - 1].row_bytes("y") * layers[i - 1].h_out for i in range(1, k)]  # T_i stashed

    cost: dict[tuple[int, int], int] = {}
    for i in range(k):
        for j in range(i + 1, k + 1):
            if any(lay.kind == "Conv" for lay in layers[i:j]) or j - i == 1:
                cost[(i, j)] = _block_bytes(layers[i:j], R, variant)
    if checkpoints == "auto":
        n_fixed = None
    else:
        n_fixed = max(1, min(int(checkpoints), k))
    thresholds = sorted(set(cost.values()))
    if len(thresholds) > 96:
        thresholds = [thresholds[int(q)] for q in np.linspace(0, len(thresholds) - 1, 96)]
    best: tuple[float, int, list[tuple[int, int]]] | None = None
    inf = float("inf")
    for B in thresholds:
        # dp[j][n] = min checkpoint bytes covering layers [0, j) with n segments, each of cost <= B
        maxn = n_fixed if n_fixed else k
        dp = [[inf] * (maxn + 1) for _ in range(k + 1)]
        back: dict[tuple[int, int], int] = {}
        dp[0][0] = 0
        for j in range(1, k + 1):
            for i in range(j):
                c = cost.get((i, j))
                if c is None or c > B:
                    continue
                for n in range(1, maxn + 1):
                    v = dp[i][n - 1] + ck[i]
                    if v < dp[j][n]:
                        dp[j][n] = v
                        back[(j, n)] = i
        ns = [n_fixed] if n_fixed else range(1, maxn + 1)
        for n in ns:
            if dp[k][n] == inf:
                continue
            obj = B + dp[k][n]
            if best is None or obj < best[0] or (obj == best[0] and n < best[1]):
                segs, j, m = [], k, n
                while m > 0:
                    i = back[(j, m)]
                    segs.append((i, j))
                    j, m = i, m - 1
                best = (obj, n, segs[::-1])
    if best is None:   # fewer cuttable places than asked: one segment per layer at most
        return [(0, k)]
    return best[2]


# ------------------------------------------------------------------------------------------- graph emission
