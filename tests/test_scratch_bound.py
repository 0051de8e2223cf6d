"""The ORT-defaults growth mode's kernel-scratch bound (planner/growth_budget.bounded_growth, scratch_passes) and
transform's reading of it: the bounded graph is priced at each limit under the plain graph's largest request
outside the pattern block, kept only where it predicts less, and its limit is what transform applies."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from onnxcomp.passes.records import PassRecord
from onnxcomp.planner import growth_budget
from onnxcomp.transform import _planned_scratch_exact, _planned_scratch_limit

KiB = 1024


def _fake(monkeypatch: Any, growth_at: dict[Any, int | None],
          cast_first_asked: list[int | None] | None = None) -> list[int | None]:
    """finished_graph(plan, L) → L (None: the passes changed nothing); _growth_of(L) → growth_at[L]; with
    ``cast_first`` the key is ("cast-first", L) (absent: the plan has no native fp16 encoder, None)."""
    asked: list[int | None] = []

    def finished(plan: Any, limit: int | None = None, exact: bool = False, cast_first: bool = False) -> Any:
        assert not exact
        if cast_first:
            if cast_first_asked is not None:
                cast_first_asked.append(limit)
            key = ("cast-first", limit)
            return None if growth_at.get(key) is None else SimpleNamespace(limit=key, bounded=limit is not None)
        asked.append(limit)
        return None if growth_at.get(limit, 0) is None else SimpleNamespace(limit=limit, bounded=True)

    monkeypatch.setattr(growth_budget, "finished_graph", finished)

    def growth_of(g: Any, base_nodes: int = 0) -> dict[str, Any]:
        return {"growth_bytes": growth_at[g.limit], "largest_outside_bytes": 0}

    monkeypatch.setattr(growth_budget, "_growth_of", growth_of)
    return asked


def test_the_lowest_bounded_prediction_is_kept_with_its_limit(monkeypatch: Any) -> None:
    asked = _fake(monkeypatch, {256 * KiB: 30, 512 * KiB: 25, 1024 * KiB: 28})
    plain = {"growth_bytes": 40, "largest_outside_bytes": 3000 * KiB}
    got = growth_budget.bounded_growth(SimpleNamespace(), plain)
    assert asked == [256 * KiB, 512 * KiB, 1024 * KiB]
    assert got["growth_bytes"] == 25 and got["scratch_limit_bytes"] == 512 * KiB


def test_the_plain_graph_is_kept_where_bounding_costs_more(monkeypatch: Any) -> None:
    _fake(monkeypatch, {256 * KiB: 50, 512 * KiB: 41, 1024 * KiB: None})
    plain = {"growth_bytes": 40, "largest_outside_bytes": 3000 * KiB}
    got = growth_budget.bounded_growth(SimpleNamespace(), plain)
    assert got["growth_bytes"] == 40 and got["scratch_limit_bytes"] is None


def test_only_limits_under_the_largest_outside_request_are_tried(monkeypatch: Any) -> None:
    asked = _fake(monkeypatch, {256 * KiB: 30, 512 * KiB: 20, 1024 * KiB: 10})
    growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 40, "largest_outside_bytes": 600 * KiB})
    assert asked == [256 * KiB, 512 * KiB]
    asked.clear()
    got = growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 40, "largest_outside_bytes": 100 * KiB})
    assert asked == [] and got["scratch_limit_bytes"] is None


def test_transform_reads_the_limit_from_the_auto_record() -> None:
    auto = PassRecord("planned", "auto", "plan", {"ort_defaults": {"scratch_limit_bytes": 256 * KiB, "spacers": []}})
    other = PassRecord("blocked", "split_conv_grad", "g", {"conv_grad": "g"})
    assert _planned_scratch_limit([other, auto]) == 256 * KiB
    assert _planned_scratch_limit([other]) is None
    step = PassRecord("planned", "auto", "plan", {"ort_defaults": None})
    assert _planned_scratch_limit([step]) is None


def test_scratch_passes_bound_both_kernels() -> None:
    names = [p.name for p in growth_budget.scratch_passes(256 * KiB)]
    assert names == ["split_conv_grad", "conv_transpose_as_conv"]
    split = growth_budget.scratch_passes(256 * KiB)[0]
    assert split.dx_by_conv and split.max_workspace_bytes == 256 * KiB


# --exact plans: the bit-identical blocks only, at the largest request outside the block halved / quartered,
# (docs/notes/setupcount.md)
def test_exact_plans_price_halving_the_largest_request_with_the_exact_passes(monkeypatch: Any) -> None:
    asked: list[tuple[int | None, bool]] = []

    def finished(plan: Any, limit: int | None = None, exact: bool = False) -> Any:
        asked.append((limit, exact))
        return SimpleNamespace(limit=limit)

    def growth_of(g: Any, base_nodes: int = 0) -> dict[str, Any]:
        return {"growth_bytes": {1800 * KiB: 25, 900 * KiB: 27}[g.limit], "largest_outside_bytes": 0}

    monkeypatch.setattr(growth_budget, "finished_graph", finished)
    monkeypatch.setattr(growth_budget, "_growth_of", growth_of)
    plain = {"growth_bytes": 26, "largest_outside_bytes": 3600 * KiB}
    got = growth_budget.bounded_growth(SimpleNamespace(), plain, exact=True)
    assert asked == [(1800 * KiB, True), (900 * KiB, True)]
    assert got["growth_bytes"] == 25 and got["scratch_limit_bytes"] == 1800 * KiB and got["scratch_exact"]
    # nothing under 128 KiB is asked for; the plain graph is kept (and says it was an exact pricing)
    asked.clear()
    got = growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 26, "largest_outside_bytes": 200 * KiB},
                                       exact=True)
    assert asked == [] and got["scratch_limit_bytes"] is None and got["scratch_exact"]


def test_exact_scratch_passes_split_convgrads_only_bit_identically() -> None:
    passes = growth_budget.scratch_passes(256 * KiB, exact=True)
    assert [p.name for p in passes] == ["split_conv_grad"]
    assert passes[0].exact and not passes[0].dx_by_conv


def test_transform_reads_whether_the_limit_is_exact() -> None:
    auto = PassRecord("planned", "auto", "plan", {"ort_defaults": {"scratch_limit_bytes": 256 * KiB,
                                                                   "scratch_exact": True}})
    assert _planned_scratch_exact([auto])
    lossy = PassRecord("planned", "auto", "plan", {"ort_defaults": {"scratch_limit_bytes": 256 * KiB}})
    assert not _planned_scratch_exact([lossy]) and not _planned_scratch_exact([])


def test_fp16_cast_first_is_priced_on_the_best_bounded_graph_and_kept_where_lower(monkeypatch: Any) -> None:
    tried: list[int | None] = []
    _fake(monkeypatch, {256 * KiB: 30, 512 * KiB: 25, 1024 * KiB: 28, ("cast-first", 512 * KiB): 22}, tried)
    got = growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 40, "largest_outside_bytes": 3000 * KiB})
    assert tried == [512 * KiB]
    assert got["growth_bytes"] == 22 and got["scratch_limit_bytes"] == 512 * KiB and got["fp16_cast_first"] is True


def test_fp16_cast_first_priced_on_the_plain_graph_and_dropped_where_higher(monkeypatch: Any) -> None:
    tried: list[int | None] = []
    _fake(monkeypatch, {("cast-first", None): 35}, tried)
    got = growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 40, "largest_outside_bytes": 100 * KiB})
    assert tried == [None] and got["growth_bytes"] == 35 and got["fp16_cast_first"] is True
    _fake(monkeypatch, {("cast-first", None): 45})
    got = growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 40, "largest_outside_bytes": 100 * KiB})
    assert got["growth_bytes"] == 40 and got["fp16_cast_first"] is False
    _fake(monkeypatch, {})            # no native fp16 encoder: nothing to price
    got = growth_budget.bounded_growth(SimpleNamespace(), {"growth_bytes": 40, "largest_outside_bytes": 100 * KiB})
    assert got["fp16_cast_first"] is False


def test_transform_reads_cast_first_from_the_auto_record() -> None:
    from onnxcomp.transform import _planned_fp16_cast_first

    auto = PassRecord("planned", "auto", "plan", {"ort_defaults": {"fp16_cast_first": True, "spacers": []}})
    assert _planned_fp16_cast_first([auto])
    assert not _planned_fp16_cast_first([PassRecord("planned", "auto", "plan", {"ort_defaults": {"spacers": []}})])
    assert not _planned_fp16_cast_first([PassRecord("planned", "auto", "plan", {"ort_defaults": None})])
