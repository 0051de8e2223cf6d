"""tools/reuse_plan.py: ORT's exact-size, newest-first buffer reuse, replayed on buffer lifetimes."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from onnxcomp.planner.buffers import Buffer, live_bytes


def _tool():  # noqa: ANN202
    path = Path(__file__).parents[1] / "tools" / "reuse_plan.py"
    spec = importlib.util.spec_from_file_location("reuse_plan", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reuse_plan", mod)     # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_a_forward_buffer_reused_in_backward_is_held_across_the_peak():
    tool = _tool()
    # "fwd" dies at step 1; "peak" (another size) fills steps 2..4; "bwd" (fwd's size) is born at 5.
    buffers = [Buffer("fwd", 8, 0, 1), Buffer("peak", 100, 2, 4), Buffer("bwd", 8, 5, 6), Buffer("other", 4, 3, 3)]
    plan = tool.reuse_plan(buffers, 7)
    shared = next(p for p in plan if [b.name for b in p.values] == ["fwd", "bwd"])
    assert (shared.start, shared.end) == (0, 6) and shared.dead_at(3)
    held = live_bytes([Buffer(str(i), p.size, p.start, p.end) for i, p in enumerate(plan)], 7)
    assert held.max() == live_bytes(buffers, 7).max() + 8


def test_newest_freed_buffer_first_and_no_reuse_of_other_sizes_or_empty_tensors():
    tool = _tool()
    buffers = [Buffer("a", 8, 0, 1), Buffer("b", 8, 0, 2), Buffer("c", 8, 3, 4), Buffer("d", 6, 3, 4),
               Buffer("e", 0, 0, 0), Buffer("f", 0, 1, 1)]
    plan = tool.reuse_plan(buffers, 5)
    groups = sorted([b.name for b in p.values] for p in plan)
    assert groups == [["a"], ["b", "c"], ["d"], ["e"], ["f"]]      # b freed after a: c takes b's buffer


def _pattern_tool():  # noqa: ANN202
    path = Path(__file__).parents[1] / "tools" / "pattern_block.py"
    spec = importlib.util.spec_from_file_location("pattern_block", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pattern_block_best_fit_over_live_blocks():
    """tools/pattern_block.py: a freed block's gap takes the next allocation that fits it (the smallest
    waste); one that fits no gap goes after the highest live block; a chain of the reuse plan is one block."""
    from onnxcomp.planner.ort_reuse import reuse_plan

    tool = _pattern_tool()
    # a (128 B) and b (64 B) live together; a dies; c (64 B) takes a's gap, d (256 B) fits none: goes on top.
    buffers = [Buffer("a", 128, 0, 1), Buffer("b", 64, 0, 3), Buffer("c", 64, 2, 3), Buffer("d", 256, 2, 3)]
    alone = reuse_plan(buffers, 4, {b.name: None for b in buffers})
    assert tool.pattern_bytes(alone, counters=False) == 128 + 64 + 256     # c at 0 (a's gap), d after b
    assert tool.pattern_bytes(alone) == 128 + 64 + 256        # no chain: program counters change nothing
    assert live_bytes(buffers, 4).max() == 64 + 64 + 256      # a packing can never beat the live peak
    # Reuse by size: y takes x's buffer, which is then held (dead) across z's life, so z cannot sit in it.
    three = [Buffer("x", 100, 0, 0), Buffer("z", 96, 2, 3), Buffer("y", 100, 5, 5)]
    # x and y one block held 0..5; z beside it
    assert tool.pattern_bytes(reuse_plan(three, 6), counters=False) == 2 * 128
    assert tool.pattern_bytes(reuse_plan(three, 6, {b.name: None for b in three})) == 128   # one offset in turn


def test_pattern_block_with_program_counters_fills_a_chains_dead_stretch():
    """tools/pattern_block.py, ``counters=True`` (ORT's training build plans the pattern with program counters):
    a block held by a reuse chain whose tensors are all dead while a new tensor lives does not occupy its
    offsets for that tensor; one whose tensors overlap it does."""
    from onnxcomp.planner.ort_reuse import reuse_plan

    tool = _pattern_tool()
    three = [Buffer("x", 100, 0, 0), Buffer("z", 96, 2, 3), Buffer("y", 100, 5, 5)]
    plan = reuse_plan(three, 6)
    assert sorted(len(p.values) for p in plan) == [1, 2]          # x and y one chain, z alone
    assert tool.pattern_bytes(plan, counters=False) == 2 * 128    # chain whole: z beside it
    assert tool.pattern_bytes(plan, counters=True) == 128         # z lives in the chain's dead stretch
    # z now overlaps y's life: the chain's offsets are taken while z lives, so z goes beside it again.
    overlapping = [Buffer("x", 100, 0, 0), Buffer("z", 96, 2, 5), Buffer("y", 100, 5, 5)]
    assert tool.pattern_bytes(reuse_plan(overlapping, 6), counters=True) == 2 * 128
