"""tools/arena_regions.py: ORT arena log → arenas and regions, and the "2P" signature (a hand-written log)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _tool():
    path = Path(__file__).parents[1] / "tools" / "arena_regions.py"
    spec = importlib.util.spec_from_file_location("arena_regions", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["arena_regions"] = mod      # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def _ext(request: int, size: int, total: int, address: int) -> str:
    p = "2026-11-24 06:34:51.0 [I:onnxruntime:Default, bfc_arena.cc:{}] "
    return "\n".join([
        p.format(347) + f"Extending BFCArena for Cpu. bin_num:2 (requested) num_bytes: {request} (actual) "
                        f"rounded_bytes:{request}",
        p.format(206) + f"Extended allocation by {size} bytes.",
        p.format(209) + f"Total allocated bytes: {total}",
        p.format(212) + f"Allocated memory at {address:#x} to {address + size:#x}",
    ])


MIB = 2 ** 20


def _log(second_address: int, pattern: int) -> str:
    return "\n".join([
        _ext(64, MIB, MIB, 0x6000_0000),                     # arena B (another session), set-up
        _ext(1728, MIB, MIB, 0x7000_0000),                   # arena A, set-up (same total as B: the newer wins)
        _ext(589824, 2 * MIB, 3 * MIB, 0x7100_0000),         # arena A again: total 3 MiB - 2 MiB = A's 1 MiB
        "STEP 0 2026-11-24 06:34:51+00:00",
        _ext(pattern, 32 * MIB, 35 * MIB, 0x7800_0000),      # A: the pattern block's region
        _ext(460800, 32 * MIB, 67 * MIB, second_address),    # A: a request that fits nothing
        "OPT 0 2026-11-24 06:34:52+00:00",
        _ext(4, MIB, MIB, 0x5000_0000),                      # a new arena in the optimizer step
    ])


def test_regions_are_grouped_by_arena_and_placed_in_the_run():
    tool = _tool()
    arenas = tool.parse(_log(0x6800_0000, 22020608))
    assert [len(a.regions) for a in arenas] == [1, 4, 1]
    a = arenas[1]
    assert [r.phase for r in a.regions] == ["setup", "setup", "STEP 0", "STEP 0"]
    assert [r.size for r in a.regions] == [MIB, 2 * MIB, 32 * MIB, 32 * MIB]
    assert a.regions[3].address == 0x6800_0000 and a.total == 67 * MIB
    assert arenas[2].regions[0].phase == "OPT 0"


def test_second_region_is_reported_only_when_the_block_would_move_there():
    tool = _tool()
    hit = tool.second_region(tool.parse(_log(0x6800_0000, 22020608))[1])
    assert hit is not None and hit[0].request == 22020608 and hit[1].request == 460800
    assert "2P" in tool.report(tool.parse(_log(0x6800_0000, 22020608)))
    # the second region above the block's: best fit keeps the block where it was
    assert tool.second_region(tool.parse(_log(0x7F00_0000, 22020608))[1]) is None
    # a block at most half its region is split: later requests fit beside it, no alternation
    assert tool.second_region(tool.parse(_log(0x6800_0000, 16 * MIB))[1]) is None
