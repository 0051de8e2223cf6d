"""planner/ort_growth.py (the ORT-defaults growth model) on hand-written cases, and the planner's
`--budget-for ort-defaults` mode (planner/growth_budget.py): its budget check, its choice and its error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

from onnxcomp.cli import main
from onnxcomp.errors import OnnxcompError
from onnxcomp.planner import growth_budget
from onnxcomp.planner.auto import AutoPlan, BudgetError, Regions
from onnxcomp.planner.ort_growth import (PAGE, Arena, GrowthModel, StepEvent, codec_run_bytes, conv_scratch,
                                         gradient_buffer_sizes, heap_peak)

KiB, MiB = 1 << 10, 1 << 20


def test_a_request_outside_a_full_pattern_region_holds_the_block_twice():
    # No set-up room: the 1.5 MiB block gets a 2 MiB region it fills (not split: the rest is < the request); a
    # 300 KiB request in step 0 opens a second 2 MiB region, mmapped below; step 1's block takes that lower
    # region (best fit ties on size, then address), so both regions have had the block written: 2P.
    gm = GrowthModel(setup=[], pattern=3 * MiB // 2, pattern_touched=None,
                     events=[StepEvent("im2col", 300 * KiB, 2, 2)])
    growth, arena = gm.simulate(steps=3)
    assert [r.size for r in arena.regions] == [2 * MiB, 2 * MiB]
    assert arena.regions[1].address < arena.regions[0].address
    assert growth == 2 * (3 * MiB // 2)     # each region: the block's pages (the request reused its pages)


def test_set_up_room_for_the_request_keeps_the_block_once():
    # A 256 KiB gradient buffer splits the first 1 MiB region and leaves 768 KiB free: the 300 KiB request fits
    # there, no second region opens, the block is written once (plus the request's pages).
    gm = GrowthModel(setup=[256 * KiB], pattern=3 * MiB // 2, pattern_touched=None,
                     events=[StepEvent("im2col", 300 * KiB, 2, 2)])
    growth, arena = gm.simulate(steps=3)
    assert [r.size for r in arena.regions] == [1 * MiB, 2 * MiB]
    assert growth == 3 * MiB // 2 + 300 * KiB


def test_a_block_with_room_beside_it_is_split_and_written_where_its_tensors_lie():
    # 600 KiB in a 2 MiB region (after a 1 MiB set-up region): split, the request goes beside it. Only the
    # pattern's written offsets count.
    gm = GrowthModel(setup=[1 * MiB], pattern=600 * KiB, pattern_touched=[(0, 100 * KiB), (400 * KiB, 600 * KiB)],
                     events=[StepEvent("dX", 500 * KiB, 1, 3)])
    growth, arena = gm.simulate(steps=2)
    assert len(arena.regions) == 2
    assert growth == 300 * KiB + 500 * KiB


def test_the_arena_best_fits_splits_and_coalesces():
    a = Arena()
    a.alloc("x", 100 * KiB)          # 1 MiB region, split
    a.alloc("y", 200 * KiB)
    a.free("x")
    a.alloc("z", 90 * KiB)           # best fit: the 100 KiB hole, not the big rest
    region = a.regions[0]
    assert region.chunks[0].start == 0 and not region.chunks[0].free
    a.free("z")
    a.free("y")
    assert [c.free for c in region.chunks] == [True] and region.chunks[0].size == MiB
    assert a.resident() == -(-(300 * KiB) // PAGE) * PAGE


def _value(name: str, shape: list[int], dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def test_conv_grad_scratch_is_one_images_im2col_and_a_bias_row():
    node = helper.make_node("ConvGrad", ["dY", "X", "W"], ["dX", "dW", "dB"], domain="com.microsoft")
    shapes = {"dY": (1, (8, 16, 10, 10)), "X": (1, (8, 4, 10, 10)), "W": (1, (16, 4, 3, 3))}
    assert conv_scratch(node, shapes) == [4 * 4 * 9 * 100, 4 * 100]
    # conv_grad.cc takes the bias row whether or not dB is wanted (a bias-free conv's ConvGrad too)
    no_db = helper.make_node("ConvGrad", ["dY", "X", "W"], ["dX", "dW"], domain="com.microsoft")
    assert conv_scratch(no_db, shapes) == [4 * 4 * 9 * 100, 4 * 100]
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], pads=[1, 1, 1, 1])
    # 16 filters against 100 output pixels: MLAS's segmented buffer, capped
    assert conv_scratch(conv, {**shapes, "Y": (1, (8, 16, 10, 10))}) == [min(4 * 4 * 9 * 100, 128 * KiB)]
    pointwise = helper.make_node("Conv", ["X", "W1"], ["Y"])
    assert conv_scratch(pointwise, {"X": shapes["X"], "W1": (1, (16, 4, 1, 1)), "Y": (1, (8, 16, 10, 10))}) == []


def test_conv_transpose_scratch_is_its_col_buffer_for_one_image():
    # ORT's conv_transpose.cc: (C_out/group·∏kernel) × ∏(input pixels) floats, whatever the strides, for 1×1 too
    node = helper.make_node("ConvTranspose", ["dY", "W"], ["dX"], pads=[1, 1, 1, 1])
    shapes = {"dY": (1, (1, 64, 40, 40)), "W": (1, (64, 64, 3, 3))}
    assert conv_scratch(node, shapes) == [4 * 64 * 9 * 1600]      # 3.5 MiB, where Conv's buffer is 128 KiB
    grouped = helper.make_node("ConvTranspose", ["dY", "Wg"], ["dX"], group=2)
    assert conv_scratch(grouped, {"dY": shapes["dY"], "Wg": (1, (64, 16, 1, 1))}) == [4 * 16 * 1600]
    assert conv_scratch(node, {"dY": shapes["dY"]}) == []            # weight shape unknown: nothing claimed


def test_a_conv_transpose_in_a_graph_is_priced_outside_the_pattern():
    from onnxcomp.planner.ort_growth import growth_model
    from onnxcomp.planner.ort_pattern import ort_optimized_model_of

    w = onnx.numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["X", "W"], ["Y"], name="up", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["Y"], ["Z"])],
        "g", [_value("X", [2, 8, 16, 16])], [_value("Z", [2, 4, 16, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    gm = growth_model(ort_optimized_model_of(model), model)
    assert [e.nbytes for e in gm.events if "scratch" in e.name] == [4 * 4 * 9 * 16 * 16]
    # the col buffer is freed when the node ends: a scratch event starts and ends at the same step
    assert all(e.at == e.until for e in gm.events if "scratch" in e.name)


def test_heap_holds_bridge_copies_and_stored_payloads_until_their_decoders():
    # bridge copies only here (run_bytes=None: no codec run); the codecs' own temporaries: the next test
    enc = helper.make_node("OnnxcompEncode_sparse", ["A"], ["p"], domain="ai.onnx.contrib",
                           params=b'{"store": "inline", "tensor": "A"}')
    enc2 = helper.make_node("OnnxcompEncode_sparse", ["B"], ["q"], domain="ai.onnx.contrib",
                            params=b'{"store": "inline", "tensor": "B"}')
    dec = helper.make_node("OnnxcompDecode_sparse", ["q"], ["B2"], domain="ai.onnx.contrib",
                           params=b'{"store": "inline", "tensor": "B"}')
    full = {"A": (1, (1 << 18,)), "B": (1, (1 << 18,)), "B2": (1, (1 << 18,))}
    assert heap_peak([enc], full, run_bytes=None) == (MiB, "OnnxcompEncode_sparse")      # the bridge's copy of A
    peak, _ = heap_peak([enc, enc2, dec], full, run_bytes=None)
    # at the decoder: both payloads (half of 1 MiB each) held and B2's 1 MiB NumPy output before ORT's copy
    assert peak == MiB // 2 + MiB // 2 + MiB
    assert heap_peak([enc, enc2], full, run_bytes=None)[0] == MiB // 2 + MiB    # A's payload beside B's bridge copy
    # without the store, the payload is ORT's tensor (in the arena), not the heap's
    plain = [helper.make_node(n.op_type, n.input, n.output, domain=n.domain) for n in (enc, enc2, dec)]
    assert heap_peak(plain, full, run_bytes=None)[0] == MiB
    relu = helper.make_node("Relu", ["A"], ["R"])
    assert heap_peak([relu], full, run_bytes=None) == (0, "")


def test_heap_holds_a_numpy_codecs_temporaries_while_it_runs():
    """An intervalmask encoder (NumPy under the default backend) holds, beside the bridge's copy of its float
    input, boolean arrays of the input's element count: ~9 MiB on MobileNetV2's 12 MiB ReLU6 input, the step's
    high-water mark under ORT's defaults (docs/notes/growthmiss.md). The heap must show more than the copies."""
    n = 1 << 18                                   # 1 MiB of float32
    enc = helper.make_node("OnnxcompEncode_intervalmask", ["A"], ["bits", "shape"], domain="ai.onnx.contrib",
                           params=b'{"hi": 6.0, "lo": 0.0, "tensor": "A"}')
    full = {"A": (1, (n,)), "bits": (2, (n // 8,))}
    copies, _ = heap_peak([enc], full, run_bytes=None)
    assert copies == 4 * n + n // 8
    peak, where = heap_peak([enc], full)
    assert where == "OnnxcompEncode_intervalmask"
    assert peak >= 4 * n + 2 * n                  # at least two n-byte boolean temporaries beside the copy
    assert codec_run_bytes(helper.make_node("Relu", ["A"], ["R"]), full) == 0


def test_each_codec_pyop_adds_heapterms_per_pyop_heap():
    """Per PyOp, the heap term the step-peak planner fitted (planner/heap_term, 30.3 KB): the lossy mobilenet_v1_s
    plans (44-50 PyOps) were predicted 13-16 % low without it (docs/notes/growthmiss.md)."""
    from onnxcomp.planner.heap_term import COEFFICIENTS
    from onnxcomp.planner.ort_growth import NODE_BYTES, _predict

    plain = _predict(GrowthModel([], 0, None, [], nodes=100))
    coded = _predict(GrowthModel([], 0, None, [], nodes=100, pyops=4))
    assert plain.node_bytes == 100 * NODE_BYTES
    assert coded.node_bytes - plain.node_bytes == 4 * int(COEFFICIENTS["pyops"]) > 100 * 1024
    assert coded.total - plain.total == coded.node_bytes - plain.node_bytes


def test_a_graphs_codec_ops_are_counted_as_pyops():
    from onnxcomp.planner.ort_growth import growth_model

    enc = helper.make_node("OnnxcompEncode_intervalmask", ["X"], ["bits", "shape"], domain="ai.onnx.contrib",
                           params=b'{"hi": 6.0, "lo": 0.0, "tensor": "X"}')
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"]), enc], "g", [_value("X", [64])],
                              [_value("Y", [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.contrib", 1)])
    assert growth_model(model, model).pyops == 1


def test_gradient_buffers_are_read_in_parameter_order():
    g = helper.make_graph([], "g", [_value("w1", [4, 4]), _value("x", [2, 4]), _value("w2", [8]),
                                    _value("w1_grad.accumulation.buffer", [4, 4]),
                                    _value("w2_grad.accumulation.buffer", [8])], [])
    assert gradient_buffer_sizes(helper.make_model(g)) == [64, 32]


# ------------------------------------------------------------------------------------------ the planner mode
def _fake_plan(peak: int, seconds: float, fits: bool = True) -> AutoPlan:
    return AutoPlan(budget=0, exact=True, target=0, chosen={}, regions=Regions(), predicted_peak=peak,
                    baseline_peak=100 * MiB, fits=fits, dominant=[], model=onnx.ModelProto(),
                    predicted_seconds=seconds)


@pytest.fixture
def fake_planner(monkeypatch: pytest.MonkeyPatch):
    """plan_auto → a plan whose step peak is its budget's (floor 40 MiB); growth = 2 × peak above 60 MiB
    (the pattern held twice), else peak + 10 MiB: not monotone in the step target."""
    calls: list[int] = []

    def plan_auto(model, budget, exact=False, min_bytes=0, pyops=True):  # noqa: ANN001, ANN202
        calls.append(budget)
        peak = min(budget, 100 * MiB)
        return _fake_plan(max(peak, 40 * MiB), (100 * MiB - peak) / MiB, fits=budget >= 40 * MiB)

    def growth_of(graph):  # noqa: ANN001, ANN202
        return None

    monkeypatch.setattr(growth_budget, "plan_auto", plan_auto)
    monkeypatch.setattr(growth_budget, "tightest_budget_for", lambda peak, margin=0: peak)
    monkeypatch.setattr(growth_budget, "finished_graph", lambda plan: plan.predicted_peak)
    monkeypatch.setattr(growth_budget, "_growth_of", lambda peak, base_nodes=0: {
        "growth_bytes": 2 * peak if peak > 60 * MiB else peak + 10 * MiB, "pattern_bytes": peak,
        "pattern_copies": 2 if peak > 60 * MiB else 1})
    return calls


def test_growth_mode_takes_the_first_plan_from_the_top_that_fits(fake_planner):
    # untouched: 100 MiB peak → 200 MiB; 85 → 170; 72 → 144; 61 → 122; 52 → 62 MiB: fits 70 MiB (target 66.5)
    plan = growth_budget.plan_for_growth(onnx.ModelProto(), 70 * MiB, exact=True)
    assert plan.fits and plan.growth["predicted_growth_bytes"] <= growth_budget.growth_target(70 * MiB)
    assert plan.predicted_peak == int(int(int(int(100 * MiB * 0.85) * 0.85) * 0.85) * 0.85)
    assert len(plan.growth["candidates"]) == 5     # stopped at the first that fits: cheaper than any below it
    assert plan.summary()["ort_defaults"]["growth_budget_bytes"] == 70 * MiB


def test_growth_mode_that_cannot_fit_names_the_lowest_predicted_growth(fake_planner):
    plan = growth_budget.plan_for_growth(onnx.ModelProto(), 30 * MiB, exact=True)
    assert not plan.fits
    assert abs(plan.growth["predicted_growth_bytes"] - 50 * MiB) <= 1     # the 40 MiB floor plan: 40 + 10
    assert plan.growth["tightest_growth_budget_bytes"] == growth_budget.tightest_growth_budget(plan.growth["predicted_growth_bytes"])
    with pytest.raises(BudgetError, match="lowest predicted growth .* is 50.0 MiB") as e:
        growth_budget.raise_if_unfit(plan)
    assert "\n" not in str(e.value)


def test_the_reported_tightest_budget_survives_a_prediction_a_few_bytes_higher(fake_planner, monkeypatch):
    first = growth_budget.plan_for_growth(onnx.ModelProto(), 30 * MiB, exact=True)
    tightest = first.growth["tightest_growth_budget_bytes"]
    # another process predicts the floor plan's growth 4 KiB higher (docs/notes/budgetguard.md §2): still accepted
    real = growth_budget._growth_of
    monkeypatch.setattr(growth_budget, "_growth_of", lambda peak, base_nodes=0: {
        **real(peak), "growth_bytes": real(peak)["growth_bytes"] + 4096})
    assert growth_budget.plan_for_growth(onnx.ModelProto(), tightest, exact=True).fits
    # without the slack (the exact edge + 1 B, as before) the same re-plan was refused
    assert not growth_budget.plan_for_growth(onnx.ModelProto(), tightest - growth_budget.TIGHTEST_SLACK + 1,
                                             exact=True).fits


def test_the_tightest_budget_is_reported_at_the_plans_margin_and_at_verifys(fake_planner):
    # a plan made at --verify's 2 % margin is accepted at a lower budget than at the default 5 %: the record says
    # the tightest budget at its own margin, and both report what `transform --verify` would accept
    default = growth_budget.plan_for_growth(onnx.ModelProto(), 30 * MiB, exact=True)
    small = growth_budget.plan_for_growth(onnx.ModelProto(), 30 * MiB, exact=True,
                                          margin=growth_budget.VERIFIED_GROWTH_MARGIN)
    floor = default.growth["predicted_growth_bytes"]
    assert small.growth["predicted_growth_bytes"] == floor
    assert default.growth["tightest_growth_budget_bytes"] == growth_budget.tightest_growth_budget(floor)
    verified = growth_budget.tightest_growth_budget(floor, growth_budget.VERIFIED_GROWTH_MARGIN)
    assert small.growth["tightest_growth_budget_bytes"] == verified < default.growth["tightest_growth_budget_bytes"]
    assert default.growth["tightest_verified_growth_budget_bytes"] == verified
    assert small.growth["margin"] == growth_budget.VERIFIED_GROWTH_MARGIN
    assert "tightest budget it accepts is %.1f MiB" % (verified / MiB) in growth_budget.growth_failure_line(small)
    assert growth_budget.plan_for_growth(onnx.ModelProto(), verified, exact=True,
                                         margin=growth_budget.VERIFIED_GROWTH_MARGIN).fits


def test_budget_for_needs_the_budget_planner(small_artifacts: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["inspect", str(small_artifacts), "--budget-for", "ort-defaults"]) != 0
    assert "--budget" in capsys.readouterr().err
    out = tmp_path / "o"
    assert main(["transform", str(small_artifacts), "-o", str(out), "--policy", "lossless",
                 "--budget-for", "ort-defaults"]) != 0
    assert not out.exists()


def test_cli_growth_budget_failure_exits_2_with_one_line(small_artifacts: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "o"
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--budget", "64KiB",
                 "--exact", "--budget-for", "ort-defaults"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "ORT-defaults growth budget" in err and "lowest predicted growth" in err
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ spacers
def test_spacers_open_doubled_regions_until_the_set_up_leaves_the_room_asked():
    from onnxcomp.passes.arena_spacer import spacer_sizes
    from onnxcomp.passes.grad_buffer_order import setup_free_chunks

    small = [4096] * 100                    # 400 KiB of buffers: one 1 MiB region, 624 KiB left
    assert max(setup_free_chunks(small)) < 2 * MiB
    sizes = spacer_sizes(small, 2 * MiB)
    assert sizes and all(s % 256 == 0 for s in sizes)
    assert max(setup_free_chunks([*small, *sizes])) >= 2 * MiB
    # each is just over the largest chunk before it: one fewer would not reach the room
    assert max(setup_free_chunks([*small, *sizes[:-1]])) < 2 * MiB
    assert spacer_sizes(small, 100 * KiB) == []                        # already there
    assert spacer_sizes(small, 1 << 40, max_spacers=2) == []           # out of reach


def test_the_spacer_model_removes_the_second_pattern_region():
    # the 2P case of the first test, with a spacer opening a region whose rest takes the request
    from onnxcomp.passes.arena_spacer import spacer_sizes

    events = [StepEvent("im2col", 300 * KiB, 2, 2)]
    setup: list[int] = []                                              # no set-up room at all
    two = GrowthModel(setup, 3 * MiB // 2, None, events).simulate()[0]
    sizes = spacer_sizes(setup, 300 * KiB)
    one = GrowthModel([*setup, *sizes], 3 * MiB // 2, None, events).simulate()[0]
    assert two == 2 * (3 * MiB // 2) and one == 3 * MiB // 2 + 300 * KiB


def test_spacers_are_priced_with_what_they_hold_at_set_up():
    # the budget sees growth + the spacers' set-up bytes: moving memory into the set-up is no saving
    from onnxcomp.passes.arena_spacer import SET_UP_COPIES
    from onnxcomp.planner.ort_growth import _predict, with_spacers

    events = [StepEvent("im2col", 300 * KiB, 2, 2)]
    big = GrowthModel([], 8 * MiB, None, events)                       # 2P: 8 MiB held twice, a spacer saves ~8
    plain = _predict(big)
    spaced = with_spacers(big, plain)
    assert plain.pattern_copies == 2 and spaced.spacers
    assert spaced.spacer_set_up == SET_UP_COPIES * sum(spaced.spacers)
    assert spaced.total < plain.total
    assert spaced.total == _predict(GrowthModel(spaced.spacers, 8 * MiB, None, events, nodes=2 * len(spaced.spacers))
                                    ).total + spaced.spacer_set_up
    # a request so large that its spacers would hold more at set-up than the second copy costs: not used
    costly = GrowthModel([], 3 * MiB // 2, None, [StepEvent("im2col", 1400 * KiB, 2, 2)])
    assert with_spacers(costly, _predict(costly)).spacers == []


def test_spacer_pass_adds_parameters_nothing_reads(small_artifacts: Path, tmp_path: Path) -> None:
    import numpy as np
    import onnxruntime as ort  # noqa: F401  (the contrib ops' schemas for the checker)

    from onnxcomp.passes.arena_spacer import ArenaSpacerPass, spacers_of

    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    out = ArenaSpacerPass([1000, 4096]).run(model)
    assert out.changed
    spacers = spacers_of(out.model)
    assert spacers == {"onnxcomp_arena_spacer0": 250, "onnxcomp_arena_spacer1": 1024}
    names = [i.name for i in out.model.graph.input]
    params = [n for n in names if n + "_grad.accumulation.buffer" in names]
    assert params[-2:] == list(spacers)                                # allocated last at set-up
    buffers = [n for n in names if n.endswith("_grad.accumulation.buffer")]
    assert buffers[-2:] == [n + "_grad.accumulation.buffer" for n in spacers]
    loss = model.graph.output[0].name
    readers = {i for n in out.model.graph.node for i in n.input}
    assert {n for n in spacers} <= readers and loss == out.model.graph.output[0].name
    # the loss's cone does not contain them: only their own zero gradient reads them
    assert {n.op_type for n in out.model.graph.node if set(n.input) & set(spacers)} == {"Sub"}
    assert not ArenaSpacerPass([1000]).run(out.model).changed         # once only
    assert np.prod([d.dim_value for d in out.model.graph.input[names.index("onnxcomp_arena_spacer1")]
                    .type.tensor_type.shape.dim]) == 1024


def test_the_spacers_a_plan_was_priced_with_are_read_from_its_record() -> None:
    from onnxcomp.passes.records import PassRecord
    from onnxcomp.transform import _planned_spacers

    class R:
        all_records = [PassRecord("planned", "auto", "auto", {"ort_defaults": {"spacers": [473600]}})]

    assert _planned_spacers(R()) == [473600]
    R.all_records = [PassRecord("planned", "auto", "auto", {"budget_bytes": 1})]
    assert _planned_spacers(R()) == []


def test_a_graph_ort_cannot_set_up_fails_the_mode_in_one_line(small_artifacts: Path, tmp_path: Path, capsys,  # noqa: ANN001
                                                              monkeypatch) -> None:  # noqa: ANN001
    from onnxcomp.planner import ort_growth

    def refuse(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise ValueError("the graph keeps initializers in external data (w.bin) and no base_dir says where")

    monkeypatch.setattr(ort_growth, "predict_growth_of", refuse)
    out = tmp_path / "o"
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--budget", "64MiB",
                 "--budget-for", "ort-defaults"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--budget-for ort-defaults" in err and "external data" in err
    assert not out.exists()


# ------------------------------------------------------------------------- set-up counted (docs/notes/setupfree.md)
def _open_only_ladder(buffers: list[int], need: int) -> list[int]:
    """The first spacer rule: each spacer one allocation unit over the largest free chunk, until the room."""
    from onnxcomp.passes.grad_buffer_order import setup_free_chunks

    sizes: list[int] = []
    while max(setup_free_chunks([*buffers, *sizes]), default=0) < need:
        sizes.append((max(setup_free_chunks([*buffers, *sizes]), default=0) // 256 + 1) * 256)
    return sizes


def test_spacers_take_the_fewest_bytes_that_leave_the_room():
    # densenet_s-like set-up: 83 small buffers (~411 KB) in the first 1 MiB region, a 2.83 MB chunk asked. Opening
    # region after region (2, 4, 8 MiB) with spacers each just over the largest chunk holds 4.8 MB; opening the
    # 2 MiB region with a spacer that leaves the first region's rest there too, then the 4 MiB one with a spacer just
    # over that rest, holds 2 MiB + 256 B.
    from onnxcomp.passes.arena_spacer import spacer_sizes
    from onnxcomp.passes.grad_buffer_order import setup_arena, setup_free_chunks

    buffers = [4952] * 83
    need = 2_830_336
    ladder = _open_only_ladder(buffers, need)
    sizes = spacer_sizes(buffers, need)
    assert max(setup_free_chunks([*buffers, *sizes])) >= need
    assert len(ladder) == 3 and sum(sizes) < 0.6 * sum(ladder)
    rest = max(setup_free_chunks(buffers))
    # the 2 MiB region opened with a rest no larger than the first region's, then the smallest opener of 4 MiB
    assert sizes == [2 * MiB - rest, rest + 256]
    assert sum(sizes) < sum([2 * MiB, rest + 256])     # less than filling the 2 MiB region whole
    assert setup_arena([*buffers, *sizes])[1] == 8 * MiB
    # one spacer alone does not do it, whatever it is
    assert max(setup_free_chunks([*buffers, 2 * MiB - rest])) < need and max(setup_free_chunks([*buffers, rest + 256])) < need


def test_set_up_added_counts_spacers_and_each_added_node():
    from onnxcomp.planner.ort_growth import SET_UP_NODE_BYTES, _predict, set_up_added_bytes, with_spacers

    events = [StepEvent("im2col", 300 * KiB, 2, 2)]
    gm = GrowthModel([], 8 * MiB, None, events, nodes=120)
    plain = _predict(gm)
    assert set_up_added_bytes(plain, 100) == 20 * SET_UP_NODE_BYTES
    assert set_up_added_bytes(plain, 500) == 0                       # fewer nodes than the input: nothing added
    spaced = with_spacers(gm, plain)
    assert spaced.spacers and spaced.nodes == 120 + 2 * len(spaced.spacers)
    assert set_up_added_bytes(spaced, 100) == spaced.spacer_set_up + (20 + 2 * len(spaced.spacers)) * SET_UP_NODE_BYTES


@pytest.fixture
def noded_planner(monkeypatch: pytest.MonkeyPatch):
    """As fake_planner, with a node count that grows as the step target falls (1 node per 10 KiB under 100 MiB) and
    the set-up each node adds priced at 16 KiB: the floor plan (40 MiB) has the lowest growth (50 MiB), the 52 MiB
    plan the lowest growth + set-up (62 + 77 MiB against 50 + 96)."""
    def plan_auto(model, budget, exact=False, min_bytes=0, pyops=True):  # noqa: ANN001, ANN202
        peak = min(budget, 100 * MiB)
        return _fake_plan(max(peak, 40 * MiB), (100 * MiB - peak) / MiB, fits=budget >= 40 * MiB)

    def growth_of(peak, base_nodes=0):  # noqa: ANN001, ANN202
        nodes = (100 * MiB - peak) // (10 * KiB)
        growth = 2 * peak if peak > 60 * MiB else peak + 10 * MiB
        added = 16 * KiB * nodes
        return {"growth_bytes": growth, "pattern_bytes": peak, "pattern_copies": 2 if peak > 60 * MiB else 1,
                "nodes": nodes, "set_up_added_bytes": added, "total_bytes": growth + added}

    monkeypatch.setattr(growth_budget, "plan_auto", plan_auto)
    monkeypatch.setattr(growth_budget, "tightest_budget_for", lambda peak, margin=0: peak)
    monkeypatch.setattr(growth_budget, "finished_graph", lambda plan: plan.predicted_peak)
    monkeypatch.setattr(growth_budget, "_growth_of", growth_of)


def test_total_mode_budgets_growth_plus_the_set_up_a_plan_adds(noded_planner):
    budget = 150 * MiB
    growth_only = growth_budget.plan_for_growth(onnx.ModelProto(), budget, exact=True, stop_at_first=False)
    total = growth_budget.plan_for_growth(onnx.ModelProto(), budget, exact=True, stop_at_first=False,
                                          budget_for="ort-defaults-total")
    g, t = growth_only.growth, total.growth
    assert t["budget_for"] == "ort-defaults-total" and g["budget_for"] == "ort-defaults"
    assert t["predicted_total_bytes"] == t["predicted_growth_bytes"] + t["predicted_set_up_added_bytes"]
    assert t["predicted_total_bytes"] <= growth_budget.growth_target(budget)
    # from the top, the growth mode stops at the 61 MiB plan (growth 123 MiB), the total mode goes on to the 52 MiB
    # one (its total 139 MiB; the 61 MiB plan's is 184)
    assert growth_only.predicted_peak > total.predicted_peak > 50 * MiB
    # the same candidates, a different edge: the growth mode's tightest budget is on growth, the total mode's on
    # growth + set-up; the plan at the growth mode's edge would not fit the total mode at that budget
    assert t["tightest_growth_budget_bytes"] > g["tightest_growth_budget_bytes"]
    edge = g["tightest_growth_budget_bytes"]
    assert growth_budget.plan_for_growth(onnx.ModelProto(), edge, exact=True).fits
    assert not growth_budget.plan_for_growth(onnx.ModelProto(), edge, exact=True,
                                             budget_for="ort-defaults-total").fits
    low = growth_budget.plan_for_growth(onnx.ModelProto(), 30 * MiB, exact=True, budget_for="ort-defaults-total")
    with pytest.raises(BudgetError, match="growth \\+ set-up added budget 30.0 MiB .* set-up added") as e:
        growth_budget.raise_if_unfit(low)
    assert "\n" not in str(e.value)
    with pytest.raises(Exception, match="budget_for"):
        growth_budget.plan_for_growth(onnx.ModelProto(), budget, budget_for="step-peak")


def test_growth_of_adds_the_set_up_to_the_prediction(small_artifacts: Path) -> None:
    from onnxcomp.planner.ort_growth import SET_UP_NODE_BYTES

    m = onnx.load(str(small_artifacts / "training_model.onnx"))
    n = len(m.graph.node)
    g = growth_budget._growth_of(m, base_nodes=n - 10)
    assert g["set_up_added_bytes"] == g["spacer_set_up_bytes"] + 10 * SET_UP_NODE_BYTES
    assert g["total_bytes"] == g["growth_bytes"] - g["spacer_set_up_bytes"] + g["set_up_added_bytes"]


def test_cli_total_budget_failure_exits_2_with_one_line(small_artifacts: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "o"
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--budget", "64KiB",
                 "--exact", "--budget-for", "ort-defaults-total"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "growth + set-up added budget" in err and "lowest predicted growth + set-up added" in err
    assert not out.exists()
    assert main(["inspect", str(small_artifacts), "--budget", "64KiB", "--exact", "--budget-for",
                 "ort-defaults-total"]) == 2
    with pytest.raises(SystemExit):
        main(["transform", "--help"])
    assert "ort-defaults-total" in capsys.readouterr().out


def test_the_growth_modes_also_price_plans_without_codec_pyops(monkeypatch: pytest.MonkeyPatch) -> None:
    # --budget-for ort-defaults[-total] plan a second descent without PyOps (their heap and set-up) where the first
    # finds no plan; the step-peak planner is not asked
    import onnx_ir as ir

    from onnxcomp.passes.auto import AutoPass

    seen: list[dict] = []

    class Stop(Exception):
        pass

    def plan_for_growth(model, budget, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append(kw)
        raise Stop

    monkeypatch.setattr(growth_budget, "plan_for_growth", plan_for_growth)
    graph = ir.Graph([], [], nodes=[], name="g")
    for mode, pyops in (("ort-defaults-total", None), ("ort-defaults", None)):
        with pytest.raises(Stop):
            AutoPass(budget_bytes=MiB, exact=True, budget_for=mode).call(ir.Model(graph, ir_version=10))
        assert seen[-1]["budget_for"] == mode and seen[-1]["pyops"] is pyops


def test_a_smaller_margin_takes_a_looser_plan_the_default_margin_refuses(fake_planner):
    # 64 MiB: the 52.2-MiB step-peak plan predicts 62.2 MiB growth, over the default target (0.95 x 64 = 60.8 MiB) but
    # within 0.98 x 64 = 62.7 MiB (growth_budget.VERIFIED_GROWTH_MARGIN, where a measurement follows)
    default = growth_budget.plan_for_growth(onnx.ModelProto(), 64 * MiB, exact=True)
    small = growth_budget.plan_for_growth(onnx.ModelProto(), 64 * MiB, exact=True,
                                          margin=growth_budget.VERIFIED_GROWTH_MARGIN)
    assert default.fits and small.fits
    assert len(small.growth["candidates"]) == 5 and len(default.growth["candidates"]) == 6
    assert small.growth["predicted_growth_bytes"] == int(int(int(int(100 * MiB * 0.85) * 0.85) * 0.85) * 0.85) + 10 * MiB
    assert default.growth["predicted_growth_bytes"] <= growth_budget.growth_target(64 * MiB) \
        < small.growth["predicted_growth_bytes"]
    assert small.growth["margin"] == pytest.approx(0.02, abs=1e-6)
    assert default.growth["margin"] == pytest.approx(growth_budget.GROWTH_MARGIN, abs=1e-6)
    assert small.growth["growth_target_bytes"] == growth_budget.growth_target(64 * MiB, 0.02)
    for bad in (-0.01, 1.0):
        with pytest.raises(OnnxcompError, match="margin"):
            growth_budget.plan_for_growth(onnx.ModelProto(), 64 * MiB, exact=True, margin=bad)


def test_the_auto_pass_hands_its_margin_to_the_planner_of_its_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx_ir as ir

    import onnxcomp.planner.auto as auto_mod
    from onnxcomp.passes.auto import AutoPass

    seen: list[tuple[str, dict]] = []

    class Stop(Exception):
        pass

    def spy(which):  # noqa: ANN001, ANN202
        def f(model, budget, **kw):  # noqa: ANN001, ANN003, ANN202
            seen.append((which, kw))
            raise Stop
        return f

    monkeypatch.setattr(growth_budget, "plan_for_growth", spy("growth"))
    monkeypatch.setattr(auto_mod, "plan_auto", spy("step"))
    graph = ir.Graph([], [], nodes=[], name="g")
    for mode, margin, which in (("ort-defaults", 0.02, "growth"), ("ort-defaults", None, "growth"),
                                ("step-peak", 0.01, "step"), ("step-peak", None, "step")):
        with pytest.raises(Stop):
            AutoPass(budget_bytes=MiB, budget_for=mode, margin=margin).call(ir.Model(graph, ir_version=10))
        assert seen[-1][0] == which
        assert seen[-1][1].get("margin") == margin       # None: not passed, the planner's own default
    with pytest.raises(OnnxcompError, match="margin"):
        AutoPass(budget_bytes=MiB, margin=1.5)


def test_a_bias_free_convgrads_row_opens_a_second_region_when_its_im2col_took_the_set_up_room():
    """Lossy densenet_s's bounded plan (docs/notes/lossyfloor.md §2, docs/notes/headroom.md): set-up leaves one free
    chunk of 630,784 B; a 460,800-B im2col takes all of it (the rest is smaller than the request: not split); the
    1,600-B bias row the same ConvGrad asks next has no room and opens a second region the size of P's: P twice.
    Without the row (the old model of a ConvGrad with no dB) the replay held P once."""
    setup = [1048576 - 630784]
    p = 22 << 20
    im2col = StepEvent("g/scratch0", 460800, 5, 5)
    row = StepEvent("g/scratch1", 1600, 5, 5)
    with_row, arena = GrowthModel(setup, p, None, [im2col, row]).simulate(steps=3)
    without, _ = GrowthModel(setup, p, None, [im2col]).simulate(steps=3)
    assert without < p + (1 << 20)
    assert with_row >= 2 * p
    assert [size for kind, _, size in arena.log if kind == "extend"].count(32 << 20) == 2
