"""What passes report: typed records in one schema, grouped by kind into the plan JSON's sections.

Every pass returns what it did as ``PassRecord``s on its ``PassResult``; ``transform`` and the plan JSON read
only those (never attributes of the pass objects). A record's ``detail`` is its JSON form; the typed fields
say what kind of change it is, which pass made it, what it concerns and which stashes it made unnecessary.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["encoded", "recomputed", "row_split", "deferred", "chunked", "split_weight", "moved", "commuted",
               "blocked", "scratch", "planned"]

# Plan-JSON section of each kind ("tensors": a stash held differently, the plan's main list).
SECTIONS: dict[str, str] = {
    "encoded": "tensors", "recomputed": "tensors", "row_split": "tensors",
    "deferred": "deferred",            # weight gradients moved to the end of backward
    "chunked": "chunked",              # first-layer backwards run in batch chunks
    "split_weight": "split_weights",   # weights held as row blocks
    "moved": "moved",                  # accumulators moved behind their gradient
    "commuted": "commuted",            # 1x1 conv + average pool swapped (passes/commute_pool.py)
    "blocked": "blocked",              # ConvGrads run as input-channel blocks (passes/split_conv_grad.py)
    "scratch": "scratch",              # kernels rewritten to ask less scratch (passes/conv_transpose_as_conv.py)
    "planned": "auto",                 # the auto planner's decisions (planner/auto.py)
}


@dataclass(frozen=True)
class PassRecord(Mapping[str, Any]):
    """One change a pass made. Reads as a mapping of its JSON form (``detail``) for reports and tests."""
    kind: Kind
    pass_name: str
    subject: str                                   # the tensor, site or parameter it concerns
    detail: dict[str, Any] = field(default_factory=dict)
    dropped_stashes: tuple[str, ...] = ()          # stashes no longer held because of this change

    def __post_init__(self) -> None:
        if self.kind not in SECTIONS:
            raise ValueError(f"unknown pass-record kind {self.kind!r}")

    @property
    def section(self) -> str:
        return SECTIONS[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.detail)

    def __getitem__(self, key: str) -> Any:
        return self.detail[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.detail)

    def __len__(self) -> int:
        return len(self.detail)


def by_section(records: list[PassRecord]) -> dict[str, list[dict[str, Any]]]:
    """The records' JSON forms grouped by plan section (every section present, possibly empty)."""
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in dict.fromkeys(SECTIONS.values())}
    for r in records:
        out[r.section].append(r.to_dict())
    return out
