"""Diagnosis: ORT's CPU arena regions from an arena log, and whether the memory pattern's block alternates ("2P").

    MALLOC_MMAP_THRESHOLD_=131072 ORT_LOG=1 python tools/pyop_rss_trace.py DIR MODEL.onnx 3 defaults 2> LOG
    python tools/arena_regions.py LOG

ORT's BFC arena logs each extension (``Extending BFCArena ... num_bytes: R``, ``Extended allocation by S``,
``Total allocated bytes: T``, ``Allocated memory at A to B``) but not which arena it belongs to. An extension
with ``T == S`` is a new arena's first region; otherwise it continues the arena whose last total is ``T - S`` (the most recently created one if several have
that total: an ambiguity of the log, rare in practice because ORT's totals carry odd set-up bytes).
``pyop_rss_trace.py`` writes ``STEP i`` / ``OPT i`` markers, so each region is placed in the run.

The "2P" signature (ORT 1.19.2's ``BFCArena::Extend`` with kNextPowerOfTwo; docs/notes in NOTES-suitedef3.md):
the pattern block P is the step-0 request that grows ``curr_region_allocation_bytes_`` (the region is the
power of two ≥ P, so it is not split: P < region < 2P, and nothing else fits beside it); the growth size is
not doubled after such an extension, so the first later request that fits no free chunk gets a region of the
same size; at the next step both are free, best fit ties on size and takes the lower address — the newer
mmap — so P moves there and both regions stay resident (growth ≈ 2P). ``second_region`` reports that case.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_REQ = re.compile(r"Extending BFCArena for \w+\. bin_num:\d+ \(requested\) num_bytes: (\d+)")
_BY = re.compile(r"Extended allocation by (\d+) bytes")
_TOTAL = re.compile(r"Total allocated bytes: (\d+)")
_AT = re.compile(r"Allocated memory at (0x[0-9a-f]+) to")
_MARK = re.compile(r"^(STEP|OPT) (\d+)")


@dataclass
class Region:
    """One arena extension: the request that caused it, the region's size and address, where in the run."""
    request: int
    size: int
    address: int
    phase: str          # "setup", "STEP i" or "OPT i": the last marker before the extension


@dataclass
class Arena:
    regions: list[Region] = field(default_factory=list)
    total: int = 0


def parse(text: str) -> list[Arena]:
    """Arenas in order of creation, each with its regions (see the module docstring for the grouping rule)."""
    arenas: list[Arena] = []
    phase, request, size = "setup", None, None
    pending: Region | None = None       # the region whose address line comes next
    for line in text.splitlines():
        mark = _MARK.match(line)
        if mark:
            phase = f"{mark.group(1)} {mark.group(2)}"
            continue
        if (m := _REQ.search(line)):
            request, size = int(m.group(1)), None
        elif (m := _BY.search(line)) and request is not None:
            size = int(m.group(1))
        elif (m := _TOTAL.search(line)) and size is not None:
            total = int(m.group(1))
            arena = next((a for a in reversed(arenas) if total != size and a.total == total - size), None)
            if arena is None:
                arena = Arena()
                arenas.append(arena)
            arena.total = total
            pending = Region(request, size, 0, phase)
            arena.regions.append(pending)
            request, size = None, None
        elif (m := _AT.search(line)) and pending is not None:
            pending.address = int(m.group(1), 16)
            pending = None
    return arenas


def second_region(arena: Arena) -> tuple[Region, Region] | None:
    """(pattern region, second region) when a step-0 region as large as the step-0 pattern region's was opened
    after it, at a lower address, by a smaller request: the block then moves there at step 1 (2P)."""
    step0 = [r for r in arena.regions if r.phase == "STEP 0"]
    for i, pat in enumerate(step0):
        if pat.request * 2 <= pat.size:   # split: the rest of the region takes later requests
            continue
        for later in step0[i + 1:]:
            if later.size == pat.size and later.request < pat.request and later.address < pat.address:
                return pat, later
    return None


def report(arenas: list[Arena]) -> str:
    out = []
    mib = 2 ** 20
    for k, arena in enumerate(arenas):
        out.append(f"arena {k}: {len(arena.regions)} regions, {arena.total / mib:.2f} MiB")
        for r in arena.regions:
            out.append(f"  {r.phase:8s} request {r.request:>10d} B  region {r.size / mib:7.2f} MiB  at {r.address:#x}")
        hit = second_region(arena)
        if hit:
            pat, sec = hit
            out.append(f"  -> 2P: the {pat.request / mib:.2f} MiB block's {pat.size / mib:.0f} MiB region is full; "
                       f"a {sec.request}-byte request opened a second {sec.size / mib:.0f} MiB region below it "
                       f"in step 0, which the block takes from step 1")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(parse(Path(sys.argv[1]).read_text())))
