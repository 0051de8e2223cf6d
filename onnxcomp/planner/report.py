"""Plan checking and the before/after footprint summary the CLI reports."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from onnxcomp.planner.buffers import Buffer, check_unique_names, lower_bound
from onnxcomp.planner.offsets import OffsetPlan, offset_plan
from onnxcomp.planner.sharing import SharingPlan, cntk_plan


def validate(plan: SharingPlan | OffsetPlan, buffers: Sequence[Buffer]) -> None:
    """Raise ValueError if `plan` lets two live-overlapping buffers share memory, misses a
    buffer, or claims a footprint it cannot have (below the lower bound or below its own use)."""
    check_unique_names(buffers)
    if isinstance(plan, SharingPlan):
        _validate_groups(plan, buffers)
    elif isinstance(plan, OffsetPlan):
        _validate_offsets(plan, buffers)
    else:
        raise TypeError(f"not a plan: {type(plan).__name__}")
    bound = lower_bound(buffers)
    if plan.footprint < bound:
        raise ValueError(f"footprint {plan.footprint} is below the lower bound {bound}")


def _validate_groups(plan: SharingPlan, buffers: Sequence[Buffer]) -> None:
    grouped = sorted(b.name for group in plan.groups for b in group)
    if grouped != sorted(b.name for b in buffers):
        raise ValueError("groups do not hold each buffer exactly once")
    for gid, group in enumerate(plan.groups):
        if any(plan.assignment.get(b.name) != gid for b in group):
            raise ValueError(f"assignment disagrees with group {gid}")
        # Sorted by start, disjoint neighbours imply pairwise disjoint. Zero-size buffers hold
        # no memory, so they cannot collide.
        members = sorted((b for b in group if b.size > 0), key=lambda b: b.start)
        for a, b in zip(members, members[1:]):
            if a.overlaps(b):
                raise ValueError(f"{a.name!r} and {b.name!r} share group {gid} while both live")
    used = sum(max((b.size for b in group), default=0) for group in plan.groups)
    if plan.footprint != used:
        raise ValueError(f"footprint {plan.footprint} but groups need {used}")


def _validate_offsets(plan: OffsetPlan, buffers: Sequence[Buffer]) -> None:
    if set(plan.offsets) != {b.name for b in buffers}:
        raise ValueError("offsets do not cover exactly the buffers")
    live = [b for b in buffers if b.size > 0]
    lo = np.array([plan.offsets[b.name] for b in live], dtype=np.int64)
    hi = lo + np.array([b.size for b in live], dtype=np.int64)
    start = np.array([b.start for b in live], dtype=np.int64)
    end = np.array([b.end for b in live], dtype=np.int64)
    if live and (lo.min() < 0 or hi.max() > plan.footprint):
        raise ValueError("a buffer lies outside [0, footprint)")
    # Row by row keeps the pairwise check vectorised without an n x n matrix.
    for i in range(len(live) - 1):
        rest = slice(i + 1, None)
        clash = (start[rest] <= end[i]) & (end[rest] >= start[i])
        clash &= (lo[rest] < hi[i]) & (hi[rest] > lo[i])
        if clash.any():
            j = i + 1 + int(np.argmax(clash))
            raise ValueError(f"{live[i].name!r} and {live[j].name!r} overlap in time and address")


@dataclass
class PlannerReport:
    """Footprints of both static planners against the dynamic-allocation lower bound."""

    cntk_bytes: int
    offset_bytes: int
    lower_bound_bytes: int
    n_buffers: int
    offset_strategy: str

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)


def plan_all(buffers: Sequence[Buffer]) -> PlannerReport:
    """Run both planners, check their plans, and summarise the footprints."""
    cntk = cntk_plan(buffers)
    offsets = offset_plan(buffers)
    validate(cntk, buffers)
    validate(offsets, buffers)
    return PlannerReport(
        cntk_bytes=cntk.footprint,
        offset_bytes=offsets.footprint,
        lower_bound_bytes=lower_bound(buffers),
        n_buffers=len(buffers),
        offset_strategy=offsets.strategy,
    )
