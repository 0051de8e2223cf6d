"""Buffer lifetimes and the dynamic-allocation lower bound every static plan is measured against."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Buffer:
    """A tensor's storage: `size` bytes live over execution steps start..end, both inclusive.

    `start` is the producer's step and `end` the last consumer's step.
    """

    name: str
    size: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"buffer {self.name!r}: size must be >= 0, got {self.size}")
        if self.start < 0:
            raise ValueError(f"buffer {self.name!r}: start must be >= 0, got {self.start}")
        if self.end < self.start:
            raise ValueError(
                f"buffer {self.name!r}: end ({self.end}) must be >= start ({self.start})"
            )

    def overlaps(self, other: Buffer) -> bool:
        """True when both are live at some common step."""
        return self.start <= other.end and other.start <= self.end


def check_unique_names(buffers: Sequence[Buffer]) -> None:
    """Plans are keyed by name, so a repeated name would silently drop a buffer."""
    seen: set[str] = set()
    for b in buffers:
        if b.name in seen:
            raise ValueError(f"duplicate buffer name {b.name!r}")
        seen.add(b.name)


def live_bytes(buffers: Sequence[Buffer], n_steps: int | None = None) -> np.ndarray:
    """Bytes live at each step 0..n_steps-1 (int64), via a difference array."""
    n = len(buffers)
    return live_bytes_arrays(
        np.fromiter((b.size for b in buffers), dtype=np.int64, count=n),
        np.fromiter((b.start for b in buffers), dtype=np.int64, count=n),
        np.fromiter((b.end for b in buffers), dtype=np.int64, count=n),
        n_steps,
    )


def live_bytes_arrays(
    sizes: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_steps: int | None = None
) -> np.ndarray:
    """live_bytes on parallel arrays, for planners that already hold them."""
    needed = int(ends.max()) + 1 if ends.size else 0
    if n_steps is None:
        n_steps = needed
    elif n_steps < needed:
        raise ValueError(f"n_steps={n_steps} but a buffer is live at step {needed - 1}")
    diff = np.zeros(n_steps + 1, dtype=np.int64)
    np.add.at(diff, starts, sizes)
    np.add.at(diff, ends + 1, -sizes)
    return np.cumsum(diff[:-1])


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """Peak live bytes: what a perfect dynamic allocator needs, so no static plan can beat it."""
    live = live_bytes(buffers)
    return int(live.max()) if live.size else 0
