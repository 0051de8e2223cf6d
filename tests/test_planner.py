"""Planner tests: Gist Fig. 7, hand cases, and randomized safety properties."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxcomp.planner import (
    Buffer,
    OffsetPlan,
    SharingPlan,
    cntk_plan,
    live_bytes,
    lower_bound,
    offset_plan,
    plan_all,
    validate,
)

MB = 2**20


# --- Gist Figure 7 -------------------------------------------------------------------------------
# Steps 0..11. X is produced at 0, used in forward at 1 and in backward at 11. A and B are
# immediately consumed forward values, C and D backward ones; none overlaps another.
IMMEDIATE = [
    Buffer("A", 8 * MB, 2, 3),
    Buffer("B", 4 * MB, 4, 5),
    Buffer("C", 8 * MB, 6, 7),
    Buffer("D", 6 * MB, 8, 9),
]
BASELINE = [Buffer("X", 10 * MB, 0, 11), *IMMEDIATE]
# SSDC: full X lives only until the encoder at step 1, encoded X (2 MB) bridges to the decoder at
# step 10, and decoded X serves the backward use at step 11.
ENCODED = [
    Buffer("X", 10 * MB, 0, 1),
    Buffer("X_enc", 2 * MB, 1, 10),
    Buffer("X_dec", 10 * MB, 10, 11),
    *IMMEDIATE,
]


def test_gist_fig7_baseline_two_groups_18mb() -> None:
    plan = cntk_plan(BASELINE)
    validate(plan, BASELINE)
    assert plan.footprint == 18 * MB
    assert [[b.name for b in g] for g in plan.groups] == [["X"], ["A", "C", "D", "B"]]


def test_gist_fig7_ssdc_two_groups_12mb() -> None:
    plan = cntk_plan(ENCODED)
    validate(plan, ENCODED)
    assert plan.footprint == 12 * MB
    assert len(plan.groups) == 2
    assert plan.groups[1] == [ENCODED[1]]  # encoded X stashed alone: 2 MB
    assert max(b.size for b in plan.groups[0]) == 10 * MB  # immediately consumed: 8 -> 10 MB


def test_gist_fig7_offset_plans_hit_lower_bound() -> None:
    for buffers, expected in ((BASELINE, 18 * MB), (ENCODED, 12 * MB)):
        plan = offset_plan(buffers)
        validate(plan, buffers)
        assert plan.footprint == lower_bound(buffers) == expected


# --- Buffer, live_bytes, lower_bound -------------------------------------------------------------
@pytest.mark.parametrize(
    "size,start,end,match",
    [(-1, 0, 0, "size"), (1, 3, 2, "end"), (1, -1, 0, "start")],
)
def test_buffer_rejects_bad_fields(size: int, start: int, end: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Buffer("b", size, start, end)


def test_live_bytes_inclusive_ends() -> None:
    bufs = [Buffer("a", 4, 0, 1), Buffer("b", 3, 1, 2), Buffer("c", 2, 4, 4)]
    assert live_bytes(bufs).tolist() == [4, 7, 3, 0, 2]
    assert live_bytes(bufs, n_steps=7).tolist() == [4, 7, 3, 0, 2, 0, 0]
    assert live_bytes(bufs).dtype == np.int64
    with pytest.raises(ValueError):
        live_bytes(bufs, n_steps=3)
    assert lower_bound(bufs) == 7


def test_empty_input_is_all_zero() -> None:
    assert live_bytes([]).size == 0
    assert lower_bound([]) == 0
    assert cntk_plan([]).footprint == 0
    assert offset_plan([]).footprint == 0
    report = plan_all([])
    assert (report.cntk_bytes, report.offset_bytes, report.lower_bound_bytes) == (0, 0, 0)
    assert report.n_buffers == 0


def test_duplicate_names_rejected() -> None:
    bufs = [Buffer("a", 1, 0, 0), Buffer("a", 1, 2, 2)]
    for planner in (cntk_plan, offset_plan):
        with pytest.raises(ValueError, match="duplicate"):
            planner(bufs)


# --- hand cases ----------------------------------------------------------------------------------
def test_disjoint_lifetimes_share() -> None:
    bufs = [Buffer("a", 5, 0, 1), Buffer("b", 3, 2, 3)]
    cntk = cntk_plan(bufs)
    assert cntk.footprint == 5 and cntk.assignment == {"a": 0, "b": 0}
    offs = offset_plan(bufs)
    assert offs.footprint == 5 and offs.offsets == {"a": 0, "b": 0}


def test_touching_lifetimes_never_share() -> None:
    # Ends are inclusive: both are live at step 2.
    bufs = [Buffer("a", 5, 0, 2), Buffer("b", 3, 2, 4)]
    cntk = cntk_plan(bufs)
    assert cntk.footprint == 8 and cntk.assignment["a"] != cntk.assignment["b"]
    offs = offset_plan(bufs)
    assert offs.footprint == 8 and offs.offsets["b"] == 5


def test_chain_footprints() -> None:
    bufs = [Buffer("a", 4, 0, 1), Buffer("b", 3, 1, 2), Buffer("c", 2, 2, 3)]
    assert lower_bound(bufs) == 7
    assert cntk_plan(bufs).footprint == 7  # c reuses a's group
    assert offset_plan(bufs).footprint == 7


def test_long_lived_buffers_stack_beside_short_ones() -> None:
    # d and e live throughout; a and b take turns in the remaining 10 bytes.
    bufs = [
        Buffer("a", 10, 0, 1),
        Buffer("b", 10, 2, 3),
        Buffer("d", 6, 0, 3),
        Buffer("e", 4, 0, 3),
    ]
    plan = offset_plan(bufs)
    validate(plan, bufs)
    assert plan.footprint == lower_bound(bufs) == 20
    assert cntk_plan(bufs).footprint == 20


def test_offsets_beat_groups() -> None:
    # b and c together fit where a was, but a group costs its largest member: 10 + 5.
    bufs = [Buffer("a", 10, 0, 1), Buffer("b", 5, 2, 3), Buffer("c", 5, 2, 3)]
    assert lower_bound(bufs) == 10
    assert offset_plan(bufs).footprint == 10
    assert cntk_plan(bufs).footprint == 15


def test_zero_size_buffers_take_no_space() -> None:
    bufs = [Buffer("a", 8, 0, 5), Buffer("z", 0, 0, 5), Buffer("y", 0, 2, 3)]
    for plan in (cntk_plan(bufs), offset_plan(bufs)):
        validate(plan, bufs)
        assert plan.footprint == 8


# --- validate catches bad plans ------------------------------------------------------------------
BAD_BUFS = [Buffer("a", 4, 0, 2), Buffer("b", 4, 1, 3), Buffer("c", 4, 5, 6)]


def test_validate_rejects_overlapping_group() -> None:
    plan = SharingPlan(groups=[[BAD_BUFS[0], BAD_BUFS[1], BAD_BUFS[2]]], footprint=4,
                       assignment={"a": 0, "b": 0, "c": 0})
    with pytest.raises(ValueError):
        validate(plan, BAD_BUFS)


def test_validate_rejects_colliding_offsets() -> None:
    # Footprint 8 meets the lower bound, but a and b collide at bytes 2..3 during steps 1..2.
    plan = OffsetPlan(offsets={"a": 0, "b": 2, "c": 0}, footprint=8, strategy="hand")
    with pytest.raises(ValueError, match="overlap"):
        validate(plan, BAD_BUFS)


def test_validate_rejects_footprint_below_lower_bound() -> None:
    plan = OffsetPlan(offsets={"a": 0, "b": 4, "c": 0}, footprint=7, strategy="hand")
    with pytest.raises(ValueError):
        validate(plan, BAD_BUFS)


def test_validate_rejects_missing_buffer() -> None:
    plan = OffsetPlan(offsets={"a": 0, "b": 4}, footprint=8, strategy="hand")
    with pytest.raises(ValueError):
        validate(plan, BAD_BUFS)


def test_validate_accepts_correct_hand_plan() -> None:
    validate(OffsetPlan(offsets={"a": 0, "b": 4, "c": 0}, footprint=8, strategy="hand"), BAD_BUFS)


# --- randomized properties -----------------------------------------------------------------------
@st.composite
def buffer_lists(draw: st.DrawFn) -> list[Buffer]:
    n = draw(st.integers(0, 40))
    bufs = []
    for i in range(n):
        start = draw(st.integers(0, 30))
        bufs.append(Buffer(f"b{i}", draw(st.integers(0, 1000)), start, start + draw(st.integers(0, 12))))
    return bufs


@settings(max_examples=300, deadline=None)
@given(buffer_lists())
def test_plans_are_safe_and_bounded(bufs: list[Buffer]) -> None:
    bound = lower_bound(bufs)
    total = sum(b.size for b in bufs)
    for plan in (cntk_plan(bufs), offset_plan(bufs)):
        validate(plan, bufs)
        assert bound <= plan.footprint <= total


@settings(max_examples=100, deadline=None)
@given(buffer_lists())
def test_every_strategy_is_safe(bufs: list[Buffer]) -> None:
    from onnxcomp.planner import STRATEGIES

    for name in STRATEGIES:
        plan = offset_plan(bufs, strategies=[name], promote_rounds=2)
        validate(plan, bufs)
        assert plan.footprint <= sum(b.size for b in bufs)


@settings(max_examples=100, deadline=None)
@given(buffer_lists())
def test_report_matches_planners(bufs: list[Buffer]) -> None:
    d = plan_all(bufs).to_dict()
    assert set(d) == {"cntk_bytes", "offset_bytes", "lower_bound_bytes", "n_buffers", "offset_strategy"}
    assert json.loads(json.dumps(d)) == d
    assert d["cntk_bytes"] == cntk_plan(bufs).footprint
    assert d["offset_bytes"] == offset_plan(bufs).footprint
    assert d["lower_bound_bytes"] == lower_bound(bufs)
    assert d["n_buffers"] == len(bufs)


# --- training-like lifetimes ---------------------------------------------------------------------
def training_like(seed: int, n_layers: int) -> list[Buffer]:
    """Stashed activations nested like a stack (produced at step i, freed at 2N - i) plus
    short-lived temporaries and gradients every step; sizes shrink with depth as in CNNs."""
    rng = np.random.default_rng(seed)
    base = [64 * MB / (1 + i // (n_layers // 5 + 1)) ** 1.5 for i in range(n_layers)]
    bufs = [
        Buffer(f"stash{i}", int(base[i] * rng.uniform(0.5, 2)), i, 2 * n_layers - i)
        for i in range(n_layers)
        if rng.random() < 0.7
    ]
    for step in range(2 * n_layers + 1):
        layer = min(step, 2 * n_layers - step, n_layers - 1)
        for k in range(int(rng.integers(1, 5))):
            life = int(rng.integers(1, 4))
            size = int(base[layer] * rng.uniform(0.2, 3))
            bufs.append(Buffer(f"t{step}_{k}", size, step, step + life))
    return bufs


@pytest.mark.parametrize("seed,n_layers", [(0, 50), (1, 100), (2, 200)])
def test_training_like_offset_plan_is_tight(seed: int, n_layers: int) -> None:
    bufs = training_like(seed, n_layers)
    plan = offset_plan(bufs)
    validate(plan, bufs)
    assert plan.footprint <= 1.03 * lower_bound(bufs)
