"""The budget planner's virtual curve counts what an option's codec ops hold while they run, and its greedy
search does not take an option whose workspace would raise the peak (MobileNetV2: the lossy plan's peak sat at
a q8 encoder of a 12 MiB tensor, ~4× its input held inside the op, which the search did not see)."""
from __future__ import annotations

import numpy as np

from onnxcomp.planner.auto import Option, _Window, greedy, virtual_live
from onnxcomp.planner.option_workspace import workspace_bytes

MB = 1 << 20


def _option(technique: str, held: int, workspace: tuple[int, int], tier_exact: bool = False) -> Option:
    return Option("x", technique, tier_exact, 40 * MB, held, 0.001, technique, workspace=workspace)


def test_virtual_curve_shows_codec_workspace() -> None:
    base = np.full(10, 100 * MB, dtype=np.int64)
    windows = {"x": _Window(start=0, held_from=3, held_to=8)}
    opt = _option("dpr-fp10", 10 * MB, (30 * MB, 20 * MB))
    live = virtual_live(base, windows, {"x": opt})
    assert live[1] == 100 * MB + 10 * MB + 30 * MB      # encoder, after the producer: payload + workspace
    assert live[8] == 100 * MB + 20 * MB                # decoder, before the first backward reader
    assert live[5] == 100 * MB - 30 * MB                # between the uses: the saving


def test_greedy_skips_an_option_whose_workspace_sets_a_new_peak() -> None:
    # A forward stretch (nodes 0-2) under the backward peak (nodes 3-7, where the stash is held).
    base = np.array([60, 60, 60, 100, 100, 100, 100, 100, 50, 50], dtype=np.int64) * MB
    windows = {"x": _Window(start=0, held_from=3, held_to=8)}
    hungry = _option("dpr-fp10", 10 * MB, (60 * MB, 0))   # gentler tier, but its encoder would peak at 130
    lean = _option("dpr-fp8", 8 * MB, (5 * MB, 0))
    chosen, peak = greedy(base, windows, {"x": [hungry, lean]}, {}, target=70 * MB)
    assert chosen["x"].technique == "dpr-fp8"
    assert peak == int(virtual_live(base, windows, chosen).max()) < 100 * MB
    # Blind to the workspace, the search takes the gentler tier and the real peak would be its encoder.
    blind = {"x": [Option(**{**o.__dict__, "workspace": (0, 0)}) for o in (hungry, lean)]}
    chosen_blind, _ = greedy(base, windows, blind, {}, target=70 * MB)
    assert chosen_blind["x"].technique == "dpr-fp10"
    assert virtual_live(base, windows, {"x": hungry}).max() > 100 * MB


def test_workspace_estimate_scales_with_the_stash() -> None:
    small = workspace_bytes("q8", {"layout": "channels"}, 4 * MB)
    large = workspace_bytes("q8", {"layout": "channels"}, 16 * MB)
    assert small[0] > 4 * MB          # the bridge's copy of the input at least
    assert all(abs(big - 4 * sm) <= 4 for big, sm in zip(large, small))   # one ratio, int-rounded
    assert workspace_bytes("dpr_fp16", {}, 4 * MB, native="fp16") == (4 * MB, 0)
