"""CNTK-style memory sharing (Gist §IV-C): buffers with disjoint lifetimes share one group."""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from onnxcomp.planner.buffers import Buffer, check_unique_names


@dataclass
class SharingPlan:
    """Groups of lifetime-disjoint buffers; each group costs its largest member."""

    groups: list[list[Buffer]]
    footprint: int
    assignment: dict[str, int] = field(default_factory=dict)


class _Group:
    """Members kept sorted by start; being pairwise disjoint, their ends are sorted too."""

    def __init__(self) -> None:
        self.members: list[Buffer] = []
        self.starts: list[int] = []

    def fits(self, buf: Buffer) -> bool:
        # Only the member starting last at or before buf.end can reach into buf's lifetime.
        i = bisect.bisect_right(self.starts, buf.end)
        return i == 0 or self.members[i - 1].end < buf.start

    def add(self, buf: Buffer) -> None:
        i = bisect.bisect_right(self.starts, buf.start)
        self.starts.insert(i, buf.start)
        self.members.insert(i, buf)


def cntk_plan(buffers: Sequence[Buffer]) -> SharingPlan:
    """Largest first, each buffer joins the first group it does not overlap (else a new one)."""
    check_unique_names(buffers)
    order = sorted(buffers, key=lambda b: (-b.size, b.start, b.name))
    groups: list[_Group] = []
    placed: list[list[Buffer]] = []  # placement order, so groups[i][0] is the group's largest
    assignment: dict[str, int] = {}
    for buf in order:
        gid = next((i for i, g in enumerate(groups) if g.fits(buf)), len(groups))
        if gid == len(groups):
            groups.append(_Group())
            placed.append([])
        groups[gid].add(buf)
        placed[gid].append(buf)
        assignment[buf.name] = gid
    footprint = sum(members[0].size for members in placed)
    return SharingPlan(groups=placed, footprint=footprint, assignment=assignment)
