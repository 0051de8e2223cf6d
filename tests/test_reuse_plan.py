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
