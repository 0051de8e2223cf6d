"""The budget planner prices the nodes of a batch-chunked plan (issue 12): once a plan with its input region in
batch chunks fits, it keeps the fewest chunks (dividing the batch evenly where it can) whose predicted peak still
fits, since every chunk repeats the region's nodes and ORT's default session keeps ~NODE_BYTES per node from its
first run. Small depthwise-separable net of tests/test_auto_chain_scale.py (batch 8): its chain rule of thumb
gives 5 chunks; 4 fit as well, in fewer nodes, and 2 do not."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxcomp.planner import auto, memo
from onnxcomp.planner.auto import (NODE_BYTES, AutoPlan, Regions, _enable_input_region, _evaluate, _fewer_chunks,
                                   chunk_candidates, encoding_techniques, fewest_chunks, plan_cost)

from test_auto_chain_scale import BATCH, MiB, _artifacts


def test_candidates_divide_the_batch_where_they_can() -> None:
    assert chunk_candidates(32, 26) == [2, 4, 8, 16]
    assert chunk_candidates(8, 5) == [2, 4]
    assert chunk_candidates(8, 2) == []
    # A prime batch: no count divides it, every count below the current one is a candidate.
    assert chunk_candidates(7, 6) == [2, 3, 4, 5]


def test_bisection_finds_the_fewest_that_fits_in_log_evaluations() -> None:
    candidates = list(range(2, 34))
    for smallest in (2, 3, 17, 33, 99):
        seen: list[int] = []

        def fits(k: int, smallest: int = smallest, seen: list[int] = seen) -> bool:
            seen.append(k)
            return k >= smallest

        tried = fewest_chunks(candidates, fits)
        assert tried == seen
        assert len(tried) <= int(np.ceil(np.log2(len(candidates) + 1)))
        fitting = [k for k in tried if k >= smallest]
        assert (min(fitting) if fitting else None) == (smallest if smallest in candidates else None)


def test_plan_cost_prices_nodes() -> None:
    # 30k nodes fewer outweigh a pattern block 4 MiB larger (ResNet-18's 26 vs 8 chunks: 45k vs 15k nodes,
    # modelled P 12.2 vs 16.2 MiB); 400 nodes fewer do not outweigh 1.1 MiB more (its 20 MiB plan, 8 vs 4 chunks).
    assert plan_cost(16 * MiB, 15_000) < plan_cost(12 * MiB, 45_000)
    assert plan_cost(19 * MiB + (512 << 10), 1_893) < plan_cost(20 * MiB + (640 << 10), 1_501)
    assert NODE_BYTES * 1000 < MiB


@pytest.fixture(scope="module")
def mid(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    return _artifacts(tmp_path_factory.mktemp("dw_mid"), 32)


def _fitting_plan(model: onnx.ModelProto, target: int, chunks: int | None = None) -> AutoPlan:
    """The chain chunked by the search's rule of thumb (or in ``chunks``), nothing else, as a fitting plan."""
    regions = Regions()
    _enable_input_region(model, regions, target)
    if chunks is not None:
        regions.input_block_chunks = chunks
    applied, seen, live = _evaluate(model, {}, regions, encoding_techniques(), 64 * 1024)
    peak = int(live.max()) + auto.predicted_heap(seen)     # the predicted step peak counts the heap term
    assert peak <= target
    return AutoPlan(target, False, target, {}, regions, peak, peak, True, [], model=applied.model, applied=applied)


def test_fewest_fitting_chunks_are_kept(mid: onnx.ModelProto) -> None:
    target = 6 * MiB
    with memo.planning_session():
        # 5: the working-set rule's count (uneven for 8); the search itself now starts at 4, the most chunks that
        # keep the chain's conv maps above the mmap threshold (auto.mmap_safe_chunks), so 5 is set here.
        plan = _fitting_plan(mid, target, chunks=5)
        start = plan.regions.input_block_chunks
        assert start == 5 and plan.regions.input_chain_layers >= 3
        rounds: list[dict] = []
        out = _fewer_chunks(mid, plan, encoding_techniques(), 64 * 1024, lambda _m: None, rounds)
        assert out.fits and out.predicted_peak <= target
        assert out.regions.input_block_chunks == 4 and BATCH % out.regions.input_block_chunks == 0
        assert out.regions.input_chain_layers == plan.regions.input_chain_layers
        assert len(out.model.graph.node) < len(plan.model.graph.node)
        # The prediction kept is that of the graph kept; 2 chunks (the only fewer count) miss the target.
        seen, live = auto.predicted_live_both_orders(out.model)
        assert int(live.max()) + out.heap_bytes == out.predicted_peak
        # The heap term is the written graph's (transform's last passes add views): at least the planner graph's.
        assert out.heap_bytes == auto.written_heap(out.applied) >= auto.predicted_heap(seen)
        evaluated = [r for r in rounds if "predicted_peak_bytes" in r]
        two = [r for r in evaluated if r["input_block_chunks"] == 2]
        assert two and two[0]["predicted_peak_bytes"] > target
        assert {r["input_block_chunks"] for r in evaluated} == {2, 4}
        # Ranked by what ORT's defaults keep: the 4-chunk plan's modelled pattern block and nodes cost less.
        costs = {r["input_block_chunks"]: r["plan_cost_bytes"] for r in rounds if "plan_cost_bytes" in r}
        assert costs[4] < costs[5]
        # Nothing fewer fits (target at the 4-chunk plan's own peak, below the 2-chunk one's): kept as it was.
        tight = AutoPlan(out.budget, False, out.predicted_peak, {}, out.regions, out.predicted_peak,
                         out.baseline_peak, True, [], model=out.model, applied=out.applied)
        assert _fewer_chunks(mid, tight, encoding_techniques(), 64 * 1024, lambda _m: None, []) is tight


@pytest.mark.slow
def test_plan_auto_keeps_fewer_chunks(mid: onnx.ModelProto) -> None:
    """Through the whole search (~30 s loaded): the plan fits with the chain in 4 chunks (the rule of thumb's 5
    before fewchunks; since peakjump the search starts at 4, mmap_safe_chunks, and 2 is evaluated and misses)."""
    plan = auto.plan_auto(mid, 6 * MiB)
    assert plan.fits and plan.regions.input_chain_layers >= 3
    assert plan.regions.input_block_chunks == 4
    assert any(r.get("input_block_chunks") == 2 for r in plan.rounds)


def test_a_plan_missing_by_its_nodes_heap_term_takes_fewer_chunks(mid: onnx.ModelProto,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """More chunks hold less live data but repeat the chain's nodes, whose small blocks cost heap pages
    (planner/heap_term.py). Priced at 4 KiB a node, the 5-chunk plan misses a target just below its predicted
    peak, and the re-chunk returns fewer chunks with a lower predicted peak (fewer nodes outweigh the live
    bytes). With the per-node price at 0 the same plan keeps its 5 chunks: the term is what moves it."""
    from onnxcomp.planner import heap_term

    def missing(nodes_price: float) -> tuple[AutoPlan, AutoPlan]:
        monkeypatch.setattr(heap_term, "COEFFICIENTS", {"nodes": nodes_price})
        with memo.planning_session():
            regions = Regions()
            _enable_input_region(mid, regions, 6 * MiB)
            regions.input_block_chunks = 5
            applied, seen, live = _evaluate(mid, {}, regions, encoding_techniques(), 64 * 1024)
            peak = auto._peak_buffers(seen, live)[0]
            plan = AutoPlan(peak - 1, False, peak - 1, {}, regions, peak, peak, False, [], model=applied.model,
                            applied=applied, heap_bytes=auto.predicted_heap(seen), nodes=len(seen.graph.node))
            return plan, _fewer_chunks(mid, plan, encoding_techniques(), 64 * 1024, lambda _m: None, [])

    plan, out = missing(4096.0)
    assert plan.heap_bytes == 4096 * plan.nodes
    assert out.regions.input_block_chunks < 5 and out.nodes < plan.nodes
    assert out.predicted_peak < plan.predicted_peak
    plan0, out0 = missing(0.0)
    assert out0 is plan0 and out0.regions.input_block_chunks == 5
