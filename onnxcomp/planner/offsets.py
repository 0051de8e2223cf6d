"""Offset planning: give each buffer an address so live-overlapping buffers never collide.

Unlike CNTK groups, a buffer may sit on top of several smaller ones, so footprints get close to
the lower bound. Placement is TFLite's best-fit (Pisarchyk & Lee 2020, "greedy by size" for
offset calculation); the order buffers are placed in is what the strategies differ by, and
`offset_plan` keeps whichever order gives the smallest footprint.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from onnxcomp.planner.buffers import Buffer, check_unique_names, live_bytes_arrays


@dataclass
class OffsetPlan:
    """Byte offset per buffer name inside one arena of `footprint` bytes."""

    offsets: dict[str, int]
    footprint: int
    strategy: str


@dataclass(frozen=True)
class _Table:
    """Buffers as parallel arrays, plus a name rank so every order is deterministic."""

    sizes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    name_rank: np.ndarray

    @classmethod
    def of(cls, buffers: Sequence[Buffer]) -> _Table:
        n = len(buffers)
        name_rank = np.empty(n, dtype=np.int64)
        name_rank[sorted(range(n), key=lambda i: buffers[i].name)] = np.arange(n)
        return cls(
            sizes=np.fromiter((b.size for b in buffers), dtype=np.int64, count=n),
            starts=np.fromiter((b.start for b in buffers), dtype=np.int64, count=n),
            ends=np.fromiter((b.end for b in buffers), dtype=np.int64, count=n),
            name_rank=name_rank,
        )


def _order_by_size(t: _Table) -> np.ndarray:
    """Largest first (ties: earlier start, then name): TFLite's greedy by size."""
    return np.lexsort((t.name_rank, t.starts, -t.sizes))


def _order_by_breadth(t: _Table) -> np.ndarray:
    """Pisarchyk & Lee's greedy by breadth: visit steps from the most to the least live bytes,
    placing each step's not-yet-placed buffers largest first.

    A buffer is placed at the first visited step it is live at, i.e. the minimum step rank over
    its lifetime, so one lexsort reproduces the step-by-step loop.
    """
    live = live_bytes_arrays(t.sizes, t.starts, t.ends)
    step_rank = np.empty(live.size + 1, dtype=np.int64)
    step_rank[np.argsort(-live, kind="stable")] = np.arange(live.size)
    step_rank[-1] = live.size  # pad so end + 1 is a valid reduceat index
    bounds = np.column_stack((t.starts, t.ends + 1)).ravel()
    first_visit = np.minimum.reduceat(step_rank, bounds)[::2]
    return np.lexsort((t.name_rank, t.starts, -t.sizes, first_visit))


def _order_by_duration(t: _Table) -> np.ndarray:
    """Longest-lived first: stashed activations settle at the bottom as a stack, and the
    short-lived traffic of each step fills in above them."""
    return np.lexsort((t.name_rank, t.starts, -t.sizes, t.starts - t.ends))


def _order_by_area(t: _Table) -> np.ndarray:
    """Largest bytes x steps first: a compromise between size and duration."""
    area = t.sizes * (t.ends - t.starts + 1)
    return np.lexsort((t.name_rank, t.starts, -t.sizes, -area))


STRATEGIES: dict[str, Callable[[_Table], np.ndarray]] = {
    "greedy_by_size": _order_by_size,
    "greedy_by_breadth": _order_by_breadth,
    "greedy_by_duration": _order_by_duration,
    "greedy_by_area": _order_by_area,
}


def _best_fit(t: _Table, order: np.ndarray) -> np.ndarray:
    """Place buffers in `order`, each into the smallest address gap between live-overlapping
    placed buffers that holds it, else just above the highest of them."""
    n = t.sizes.size
    offsets = np.zeros(n, dtype=np.int64)
    sizes, starts, ends = t.sizes.tolist(), t.starts.tolist(), t.ends.tolist()
    # Placed buffers, kept sorted by offset so any live subset comes out in address order.
    p_start = np.empty(n, dtype=np.int64)
    p_end = np.empty(n, dtype=np.int64)
    p_lo = np.empty(n, dtype=np.int64)
    p_hi = np.empty(n, dtype=np.int64)
    k = 0
    for i in order.tolist():
        size = sizes[i]
        if size == 0:  # takes no space, so offset 0 never collides
            continue
        live = np.flatnonzero((p_start[:k] <= ends[i]) & (p_end[:k] >= starts[i]))
        offset = 0
        if live.size:
            lo = p_lo[live]
            ceiling = np.maximum.accumulate(p_hi[live])
            gaps = lo.copy()  # free bytes just below each live buffer
            gaps[1:] -= ceiling[:-1]
            fit = np.flatnonzero(gaps >= size)
            if fit.size:
                j = fit[np.argmin(gaps[fit])]
                offset = int(lo[j] - gaps[j])
            else:
                offset = int(ceiling[-1])
        offsets[i] = offset
        pos = int(np.searchsorted(p_lo[:k], offset, side="right"))
        for arr, value in ((p_start, starts[i]), (p_end, ends[i]), (p_lo, offset), (p_hi, offset + size)):
            arr[pos + 1 : k + 1] = arr[pos:k]
            arr[pos] = value
        k += 1
    return offsets


def _footprint(t: _Table, offsets: np.ndarray) -> int:
    return int((offsets + t.sizes).max()) if t.sizes.size else 0


def _promote_tops(t: _Table, order: np.ndarray, offsets: np.ndarray, footprint: int) -> np.ndarray:
    """Move the buffers that reach the footprint to the front of the order: placed first they
    sit low, and whatever pushed them up must find room elsewhere."""
    tops = np.isin(order, np.flatnonzero(offsets + t.sizes == footprint))
    return np.concatenate((order[tops], order[~tops]))


# Placements the promote phase may spend beyond the base strategies (~20 us each), so plans for
# thousands of buffers stay well under a second; small graphs get up to _MAX_ROUNDS reruns.
_PROMOTE_PLACEMENTS = 16_000
_MAX_ROUNDS = 32


def offset_plan(
    buffers: Sequence[Buffer],
    strategies: Sequence[str] | None = None,
    promote_rounds: int | None = None,
) -> OffsetPlan:
    """Best-fit offsets under each placement order in `strategies` (default: all), then
    `promote_rounds` reruns (default: sized to the input) that cycle through the strategies,
    each moving its last plan's topmost buffers to the front. Returns the smallest footprint;
    ties go to the earlier plan."""
    check_unique_names(buffers)
    names = list(STRATEGIES) if strategies is None else list(strategies)
    unknown = [s for s in names if s not in STRATEGIES]
    if unknown or not names:
        raise ValueError(f"unknown or no strategies {unknown}; choose from {list(STRATEGIES)}")
    if not buffers:
        return OffsetPlan(offsets={}, footprint=0, strategy="none")
    t = _Table.of(buffers)
    if promote_rounds is None:
        promote_rounds = min(_MAX_ROUNDS, _PROMOTE_PLACEMENTS // len(buffers))
    floor = int(live_bytes_arrays(t.sizes, t.starts, t.ends).max())

    runs = []  # per strategy: [order, offsets, footprint]
    best: tuple[int, str, np.ndarray] | None = None
    for name in names:
        order = STRATEGIES[name](t)
        offsets = _best_fit(t, order)
        runs.append([order, offsets, _footprint(t, offsets)])
        if best is None or runs[-1][2] < best[0]:
            best = (runs[-1][2], name, offsets)
    for r in range(promote_rounds):
        if best[0] == floor:  # already optimal
            break
        run = runs[r % len(runs)]
        run[0] = _promote_tops(t, *run)
        run[1] = _best_fit(t, run[0])
        run[2] = _footprint(t, run[1])
        if run[2] < best[0]:
            best = (run[2], f"{names[r % len(runs)]}+promote", run[1])

    footprint, name, offsets = best
    return OffsetPlan(
        offsets={b.name: int(o) for b, o in zip(buffers, offsets)},
        footprint=footprint,
        strategy=name,
    )
