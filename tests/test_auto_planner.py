"""The auto planner (`--policy auto --budget SIZE [--exact]`, planner/auto.py): ladder and search on small
hand-written graphs, failure exit and message, --exact, the plan JSON; one torch-exported model measured."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from graphs import _CONV, TWO_CONV, parse
from onnxcomp.cli import main
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import POLICIES, RowSplitPass
from onnxcomp.planner.auto import (BudgetError, tightest_budget_for, Option, _Window, encoding_techniques, greedy,
                                   greedy_restarts, plan_auto, virtual_live)
from onnxcomp.planner.predict import predicted_peak
from onnxcomp.transform import transform, transform_model

MiB = 1 << 20
KiB = 1 << 10


def _big_two_conv() -> onnx.ModelProto:
    """TWO_CONV at batch 8, 32x32: each stash 128 KiB, above the encoders' 64 KiB floor."""
    return parse(TWO_CONV.replace("float[2,3,8,8] input", "float[8,3,32,32] input"))


def _peak(model: onnx.ModelProto) -> int:
    return predicted_peak(model)


def _exact_budget(model: onnx.ModelProto) -> int:
    """A budget the exact techniques can just meet: above the best peak they reach."""
    floor = plan_auto(model, 4 * KiB, exact=True)
    assert not floor.fits and floor.predicted_peak < _peak(model)
    return tightest_budget_for(floor.predicted_peak) + KiB


def _decisions(model: onnx.ModelProto, budget: int, exact: bool) -> list[dict]:
    result = transform_model(model, "auto", budget_bytes=budget, exact=exact)
    return result.section("auto")[0]["decisions"]


def test_auto_is_a_policy_with_declared_options() -> None:
    assert {"budget_bytes", "exact"} <= POLICIES["auto"].options
    with pytest.raises(OnnxcompError, match="needs a memory budget"):
        POLICIES["auto"].build()
    with pytest.raises(OnnxcompError, match="does not take option"):
        POLICIES["lossless"].build(exact=True)


def test_techniques_come_from_the_pass_registry() -> None:
    names = {t.name: t.exact for t in encoding_techniques()}
    assert names["signbits"] and names["maxpool_index"] and names["sparse"]
    assert not names["dpr-fp16"] and not names["zfp-8"] and not names["error_bounded"]
    # A new encoding pass needs no planner change: any EncodeStashPass subclass is picked up.
    from onnxcomp.analysis.patterns import LOSSLESS
    from onnxcomp.passes.encode_stash import EncodeStashPass

    class _Probe(EncodeStashPass):
        name = "probe_enc"
        encoding = LOSSLESS[0]

        def select(self, analysis, stash):  # noqa: ANN001, ANN201
            return "never"

    assert any(t.name == "probe_enc" and t.exact for t in encoding_techniques())
    del _Probe
    import gc

    gc.collect()
    assert not any(t.name == "probe_enc" for t in encoding_techniques())


def test_generous_budget_changes_nothing_costly() -> None:
    model = _big_two_conv()
    decisions = _decisions(model, 10 * _peak(model), exact=False)
    assert decisions == []


def test_exact_only_chooses_exact_techniques_and_fits() -> None:
    model = _big_two_conv()
    plan = plan_auto(model, _exact_budget(model), exact=True)
    assert plan.fits and plan.chosen
    assert all(o.exact for o in plan.chosen.values())
    assert not plan.regions.chunked and not plan.regions.split_weight_bytes
    # The prediction is the written graph's: transform ends with DefaultOrderPass, which deletes the unread loss
    # (ORT would hold an unread output to the end of the step).
    from onnxcomp.passes.default_order import DefaultOrderPass

    # The predicted step peak is the live curve's peak plus the graph's heap term (planner/heap_term.py).
    from onnxcomp.planner.heap_term import heap_features, heap_term

    written = DefaultOrderPass().run(plan.model).model
    assert plan.heap_bytes == heap_term(heap_features(written)) > 0 and plan.nodes == len(written.graph.node)
    assert _peak(written) + plan.heap_bytes == plan.predicted_peak <= plan.target


def test_exact_techniques_come_before_lossy_ones() -> None:
    """A budget the exact techniques can meet is met by them alone even when lossy ones are allowed."""
    model = _big_two_conv()
    budget = _exact_budget(model)
    exact = plan_auto(model, budget, exact=True)
    lossy_allowed = plan_auto(model, budget, exact=False)
    assert lossy_allowed.fits and all(o.exact for o in lossy_allowed.chosen.values())
    assert {o.technique for o in lossy_allowed.chosen.values()} == {o.technique for o in exact.chosen.values()}


def test_unreachable_budget_fails_loudly_with_the_best_peak_and_what_dominates() -> None:
    model = _big_two_conv()
    with pytest.raises(BudgetError) as err:
        transform_model(model, "auto", budget_bytes=4 * KiB, exact=True)
    msg = str(err.value)
    assert "best reachable predicted step peak" in msg and "MiB" in msg and "\n" not in msg
    plan = plan_auto(model, 4 * KiB, exact=True, min_bytes=0)
    assert not plan.fits and plan.dominant and all(name in msg for name, _ in plan.dominant[:1])
    assert err.value.exit_code == 2


def test_greedy_takes_cheapest_per_byte_at_the_peak_within_the_lowest_tier() -> None:
    base = np.array([10, 50, 100, 60, 10], dtype=np.int64)
    windows = {"a": _Window(0, 1, 4), "b": _Window(0, 2, 3), "c": _Window(0, 3, 4)}
    opt = {
        "a": [Option("a", "sparse", True, 40, 20, 1.0, ""), Option("a", "dpr-fp8", False, 40, 10, 0.1, "")],
        "b": [Option("b", "recompute", True, 30, 0, 0.3, ""), Option("b", "dpr-fp16", False, 30, 15, 0.0, "")],
        "c": [Option("c", "recompute", True, 30, 0, 0.0, "")],    # not live at the peak (node 2)
    }
    chosen, peak = greedy(base, windows, opt, {}, target=75)
    # At node 2 both a and b are live; exact options first: b's recompute (0.01 s/B) beats a's sparse (0.05).
    assert set(chosen) == {"b"} and chosen["b"].technique == "recompute" and peak == 70
    chosen, peak = greedy(base, windows, opt, {}, target=55)
    assert chosen["a"].technique == "sparse" and chosen["b"].technique == "recompute" and peak <= 55
    chosen, peak = greedy(base, windows, opt, {}, target=30)
    assert chosen["a"].technique == "dpr-fp8"    # the exact tier exhausted at the peak: lossy
    live = virtual_live(base, windows, chosen)
    assert live.max() == peak and live[2] == 100 - 30 - 30


def test_plan_json_has_one_record_per_decision(tmp_path: Path) -> None:
    src = tmp_path / "train.onnx"
    model = _big_two_conv()
    onnx.save(model, src)
    out = tmp_path / "auto.onnx"
    budget = _exact_budget(model)
    transform(src, out, "auto", budget_bytes=budget, exact=True)
    plan = json.loads(out.with_suffix(".plan.json").read_text())
    auto = plan["auto"]
    assert auto["fits"] and auto["budget_bytes"] == budget and auto["predicted_peak_bytes"] <= budget
    assert auto["decisions"]
    for d in auto["decisions"]:
        assert {"tensor", "technique", "original_bytes", "held_bytes", "predicted_seconds", "why"} <= set(d)
        assert d["exact"]


def test_cli_budget_failure_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "train.onnx"
    onnx.save(_big_two_conv(), src)
    out = tmp_path / "auto.onnx"
    code = main(["transform", str(src), "-o", str(out), "--policy", "auto", "--budget", "4KiB", "--exact"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "best reachable predicted step peak" in err
    assert not out.exists()


def test_inspect_budget_previews_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "train.onnx"
    model = _big_two_conv()
    onnx.save(model, src)
    before = sorted(p.name for p in tmp_path.iterdir())
    budget = _exact_budget(model)
    assert main(["inspect", str(src), "--budget", str(budget), "--exact", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["auto"]["fits"] and report["auto"]["decisions"] and report["stashed"]
    assert main(["inspect", str(src), "--budget", "4KiB"]) == 2
    assert "cannot be met" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_rows_auto_that_cannot_fit_is_an_error_not_a_flag() -> None:
    with pytest.raises(OnnxcompError, match="(fits|over) the budget"):
        RowSplitPass(rows="auto", budget_bytes=1024).run(_big_two_conv())


@pytest.mark.slow
def test_auto_on_a_torch_model_fits_when_measured_and_exact_is_bit_identical(tmp_path: Path) -> None:
    from conftest import build_small_artifacts

    from onnxcomp.runtime.measure import measure

    # 16x64x64 maps (4 MiB, above the mmap threshold): at 32x32 glibc's heap slack alone moved one plan's
    # measured peak by 0.5 MiB between runs.
    art = build_small_artifacts(tmp_path / "art", batch=16, image=64, channels=(16, 32))
    base = measure(art, steps=2)
    model = onnx.load(str(art / "training_model.onnx"))
    for exact in (True, False):
        # The tightest budget the planner accepts: just above the best peak it can reach.
        floor = plan_auto(model, 1 << 16, exact=exact)
        assert not floor.fits and floor.predicted_peak < base.peak_bytes
        budget = tightest_budget_for(floor.predicted_peak) + (64 << 10)
        out = art / f"auto_{exact}.onnx"
        result = transform(art, out, "auto", budget_bytes=budget, exact=exact)
        assert result.section("auto")[0]["fits"]
        m = measure(art, model=out, steps=2)
        assert m.peak_bytes <= budget, (exact, m.peak_bytes, budget)
        if exact:
            assert m.losses == base.losses


def test_an_option_may_relieve_the_tensor_its_stash_is_made_from() -> None:
    """Clip's gradient mask is made late from the Clip input; the interval mask takes that input early, so
    its saving lies in the input's window, not in the mask's (empty) one."""
    base = np.array([10, 80, 80, 10], dtype=np.int64)
    windows = {"mask": _Window(3, 3, 3), "x": _Window(0, 1, 3)}
    opt = {"mask": [Option("mask", "intervalmask", True, 70, 5, 0.1, "", relieves="x")]}
    chosen, peak = greedy(base, windows, opt, {}, target=40)
    assert chosen["mask"].relieves == "x" and peak == 15


def test_auto_reports_modified_only_when_its_plan_changes_the_graph() -> None:
    """AutoPass runs the chosen pipeline on the model itself: a generous budget on a graph already in the
    accumulation order changes nothing and says so (the plan record is still there); on the graph as the
    gradient builder left it the same plan moves the accumulators."""
    from onnxcomp.passes import EagerAccumulationPass

    model = _big_two_conv()
    ordered = EagerAccumulationPass().run(model).model
    calm = transform_model(ordered, "auto", budget_bytes=10 * _peak(model))
    assert calm.modified_by == [] and calm.section("auto")[0]["decisions"] == []
    assert [n.name for n in calm.model.graph.node] == [n.name for n in ordered.graph.node]
    moved = transform_model(model, "auto", budget_bytes=10 * _peak(model))
    assert moved.modified_by[:1] == ["auto"] and moved.section("moved")   # then default_order may drop dead nodes


def test_greedy_stuck_keeps_its_lowest_curve() -> None:
    """Giving up a recomputation that pins a stash at an unreachable peak must not end above the best curve
    the search reached (ResNet-18 --exact: 34.4 MiB instead of 32.0 before this was kept)."""
    base = np.array([10, 50, 100, 60, 10], dtype=np.int64)
    windows = {"x": _Window(0, 1, 4), "y": _Window(0, 1, 4)}
    opt = {"x": [Option("x", "sparse", True, 40, 20, 1.0, "")],
           "y": [Option("y", "recompute", True, 30, 0, 0.0, "", rebuilds=("y",), leaves=("x",))]}
    chosen, peak = greedy(base, windows, opt, {}, target=10)
    assert peak == 70 and set(chosen) == {"y"}
    assert virtual_live(base, windows, chosen).max() == peak



def _blocked_by_a_cheap_choice() -> tuple[np.ndarray, dict[str, _Window], dict[str, list[Option]]]:
    """c's sign bits are the cheapest per byte at the peak and are taken first; a's recomputation, which
    reads c whole, then gains nothing (it would give c's saving back), though a rebuilt with c raw ends lower."""
    base = np.array([10, 60, 100, 100, 60, 10], dtype=np.int64)
    windows = {"a": _Window(0, 1, 4), "b": _Window(0, 2, 4), "c": _Window(0, 2, 4)}
    opt = {"a": [Option("a", "recompute", True, 30, 0, 0.5, "", rebuilds=("a",), leaves=("c",))],
           "b": [Option("b", "recompute", True, 20, 0, 0.5, "", rebuilds=("b",), leaves=("c",)),
                 Option("b", "signbits", True, 20, 5, 0.1, "")],
           "c": [Option("c", "signbits", True, 40, 5, 0.3, "")]}
    return base, windows, opt


def test_greedy_restarts_reach_below_a_greedy_blocked_by_its_first_choices() -> None:
    base, windows, opt = _blocked_by_a_cheap_choice()
    chosen, peak = greedy(base, windows, opt, {}, target=10)
    assert peak == 70 and {(o.stash, o.technique) for o in chosen.values()} == {("b", "signbits"), ("c", "signbits")}
    banned: set[tuple[str, str]] = set()
    better, low = greedy_restarts(base, windows, opt, {}, target=10, banned=banned)
    # a's recomputation forced in, c held raw; node 4 (60, no stash held there) is the floor.
    assert low == 60 and {(o.stash, o.technique) for o in better.values()} == {("a", "recompute"), ("b", "signbits")}
    assert virtual_live(base, windows, better).max() == low
    # Banned options are not forced in: without a's recomputation nothing beats the greedy.
    same, peak2 = greedy_restarts(base, windows, opt, {}, target=10, banned={("a", "recompute")})
    assert peak2 == 70 and same == chosen


def test_greedy_restarts_leave_a_greedy_that_meets_its_target_alone() -> None:
    """Where the greedy meets the target, its (cheapest) choice is kept as it is; a restart that meets a target
    the greedy misses is the one with the fewest seconds."""
    base, windows, opt = _blocked_by_a_cheap_choice()
    for target in (85, 70):
        assert greedy_restarts(base, windows, opt, {}, target=target) == greedy(base, windows, opt, {}, target=target)
    chosen, peak = greedy_restarts(base, windows, opt, {}, target=65)
    assert peak <= 65 and sum(o.seconds for o in chosen.values()) == pytest.approx(0.6)


# input -> Conv -> Relu (r) -> Conv (x) -> BatchNorm -> Relu (y) -> Conv. One joint RecomputePass run rebuilds
# y from x (through r it would exceed max_depth), which keeps x whole; x can still be rebuilt from r alone.
_PINNED = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w0, float[4,4,3,3] w1, float[4] scale, float[4] bias, float[4] mean,
       float[4] var, float[4,4,3,3] w2, bool lazy_reset_grad, float loss_grad, float[4,3,3,3] w0_buf,
       float[4,4,3,3] w1_buf, float[4,4,3,3] w2_buf) => (bool w0_out, bool w1_out, bool w2_out)
{{
  a = Conv <pads=[1,1,1,1]> (input, w0)
  r = Relu (a)
  x = Conv <pads=[1,1,1,1]> (r, w1)
  bn, rm, rv, sm, sis = com.microsoft.BatchNormInternal <epsilon=0.00001, momentum=0.9> (x, scale, bias, mean, var)
  y = Relu (bn)
  z = Conv <pads=[1,1,1,1]> (y, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dy, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dz, y, w2)
  dbn = com.microsoft.ReluGrad (dy, y)
  dx, dscale, dbias = com.microsoft.BatchNormalizationGrad <epsilon=0.00001> (dbn, x, scale, sm, sis)
  dr, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dx, r, w1)
  da = com.microsoft.ReluGrad (dr, r)
  dinput, w0_grad, db0 = com.microsoft.ConvGrad <{_CONV}> (da, input, w0)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
  w0_out = com.microsoft.InPlaceAccumulatorV2 (w0_buf, w0_grad, lazy_reset_grad)
}}
"""


def test_a_stash_kept_whole_by_a_joint_recompute_is_still_offered_alone() -> None:
    from onnxcomp.passes import RecomputePass
    from onnxcomp.passes.recompute import CHEAP_OPS, PINNED_REASON
    from onnxcomp.planner.auto import RECOMPUTE_CONV, _recomputable

    model = parse(_PINNED)
    joint = RecomputePass(ops=CHEAP_OPS | {"Conv"}).run(model)
    assert any(s.name == "x" and s.reason == PINNED_REASON for s in joint.skipped)
    # Offered, and (r being recomputable too) rebuilt through r down to the image rather than pinning r.
    cloned, kept, extended = _recomputable(model)[RECOMPUTE_CONV]["x"]
    assert cloned == ["Conv", "Relu", "Conv"] and kept == [] and extended == []


def test_without_extension_a_recompute_conv_reads_its_recomputable_input_whole() -> None:
    from onnxcomp.planner.auto import RECOMPUTE_CONV, _recomputable

    model = parse(_PINNED)
    deep = _recomputable(model)[RECOMPUTE_CONV]["x"]
    plain = _recomputable(model, extend=False)[RECOMPUTE_CONV]["x"]
    assert deep[1] == [] and plain[1] == ["r"] and plain[2] == []


def test_plan_is_no_higher_than_any_of_its_option_set_variants() -> None:
    from onnxcomp.planner.auto import DEFAULT_MARGIN, _plan_auto

    model = _big_two_conv()
    best = plan_auto(model, 4 * KiB, exact=True, workspace_aware=False)
    assert not best.fits
    for joint, extend in ((False, True), (False, False), (True, True)):
        variant = _plan_auto(model, 4 * KiB, True, 64 * KiB, DEFAULT_MARGIN, None, joint, False, None, extend)
        assert best.predicted_peak <= variant.predicted_peak


def test_lossy_plans_end_with_mask_grad_exact_plans_never() -> None:
    """A pipeline with a lossily held stash ends like the fixed lossy policies (ReluGrad on a sign mask as Mul,
    passes/mask_grad.py); a pipeline of exact choices (every --exact plan) never runs that pass."""
    from onnxcomp.passes import MaskGradPass
    from onnxcomp.planner.auto import Regions, build_passes

    techniques = encoding_techniques()
    dpr = next(t for t in techniques if not t.exact)
    exact = next(t for t in techniques if t.exact)
    lossy = build_passes({"x": Option("x", dpr.name, False, 1, 1, 0.0, "")}, Regions(), techniques, 0)
    assert isinstance(lossy[-1], MaskGradPass)
    kept = build_passes({"x": Option("x", exact.name, True, 1, 1, 0.0, "")}, Regions(), techniques, 0)
    assert not any(isinstance(p, MaskGradPass) for p in kept)


def test_transformer_passes_join_the_plan_only_on_transformer_graphs() -> None:
    """auto composes the exact transformer passes (passes/transformer.py) where the graph differentiates a
    LayerNorm or a Softmax; a CNN graph never gets them."""
    from onnx import TensorProto, helper

    from onnxcomp.passes import TRANSFORMER_EXACT
    from onnxcomp.planner.auto import Regions, _has_transformer_gradients, build_passes, encoding_techniques

    def graph_with(op: str, domain: str) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
        node = helper.make_node(op, ["x"], ["y"], domain=domain)
        return helper.make_model(helper.make_graph([node], "g", [x], [y]))

    assert _has_transformer_gradients(graph_with("SoftmaxGrad_13", "com.microsoft"))
    assert _has_transformer_gradients(graph_with("LayerNormalizationGrad", "com.microsoft"))
    assert not _has_transformer_gradients(graph_with("ReluGrad", "com.microsoft"))
    techniques = encoding_techniques()
    with_t = {type(p) for p in build_passes({}, Regions(transformer=True), techniques, 64 * 1024)}
    without = {type(p) for p in build_passes({}, Regions(), techniques, 64 * 1024)}
    assert set(TRANSFORMER_EXACT) <= with_t
    assert not set(TRANSFORMER_EXACT) & without


def test_planner_prices_a_cast_by_its_type_pair() -> None:
    """The profile-less planner passes op_kind, so a mask unpack (bool -> float32) is priced by its own
    calibrated fit, not by the float32 <-> float16 conversion fit."""
    from onnx import TensorProto, helper

    from types import SimpleNamespace

    from onnxcomp.analysis.shapes import TensorType
    from onnxcomp.planner.auto import _Costs
    from onnxcomp.planner.cost_model import CostModel, LinearFit

    def tensor(dtype: str) -> SimpleNamespace:
        t = TensorType((64, 1024), np.dtype(dtype))
        return SimpleNamespace(type=t, shape=t.shape, nbytes=t.nbytes)

    # the analysis' view of the two tensors (what _Costs.ops reads of a GraphAnalysis)
    analysis = SimpleNamespace(tensors={"m": tensor("bool"), "f": tensor("float32")})
    cast = helper.make_node("Cast", ["m"], ["f"], to=TensorProto.FLOAT, name="unpack")
    costs = _Costs()
    costs.model = CostModel({}, {"*": LinearFit((0.0, 1e-9, 0.0)), "Cast": LinearFit((0.0, 1e-9, 0.0)),
                                 "Cast:bool->float32": LinearFit((0.0, 1e-10, 0.0))})
    assert costs.ops(analysis, [cast]) == pytest.approx(1e-10 * 5 * 64 * 1024)


def _recomputable_by_runs(model: onnx.ModelProto, alone: bool = True, extend: bool = True) -> dict:
    """The recompute tables as they were made before ``RecomputePass.plan_table``: one whole ``RecomputePass.run``
    (load, rewrite, check, serialise) per question, read from its records. Kept here as the reference."""
    from onnxcomp.passes import RecomputePass
    from onnxcomp.passes.recompute import CHEAP_OPS, PINNED_REASON
    from onnxcomp.planner.auto import EXTEND_FRACTION, RECOMPUTE_CONV, _deepen

    def table(res):
        return {r.subject: (list(r.detail.get("cloned_ops", [])), list(r.detail.get("inputs_kept", [])),
                            list(r.detail.get("inputs_extended", [])))
                for r in res.records if r.kind == "recomputed"}

    out = {}
    fraction = EXTEND_FRACTION if extend else 0.0
    for technique, ops in (("recompute", CHEAP_OPS), (RECOMPUTE_CONV, CHEAP_OPS | {"Conv"})):
        run = lambda names=None, ops=ops: RecomputePass(tensors=names, ops=ops,  # noqa: E731
                                                        extend_fraction=fraction).run(model)
        res = run()
        joint = table(res)
        if alone:
            for s in res.skipped:
                if s.name not in joint and s.reason.startswith(PINNED_REASON):
                    own = table(run([s.name])).get(s.name)
                    if own is not None:
                        joint[s.name] = own
        for subject in [k for k, (cloned, _, _) in joint.items() if not cloned and alone]:
            own = table(run([subject])).get(subject)
            if own is None:
                joint.pop(subject)
            else:
                joint[subject] = own
        if alone and extend and technique == RECOMPUTE_CONV:
            _deepen(model, joint, lambda names, run=run: table(run(names)))
        out[technique] = joint
    return out


# A dense block (ConcatTraining of the block input and a new conv's features) under BN-ReLU, then MaxPool:
# recomputation through convolutions, kept-alive forward tensors (extension), _deepen and a MaxPool's indices
# rebuilt beside its output all occur.
_DENSE = f"""
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w0, float[2,4,3,3] w1, float[6] scale, float[6] bias, float[6] mean,
       float[6] var, float[4,6,3,3] w2, bool lazy_reset_grad, float loss_grad, float[4,3,3,3] w0_buf,
       float[2,4,3,3] w1_buf, float[4,6,3,3] w2_buf) => (bool w0_out, bool w1_out, bool w2_out)
      <float[2,6,8,8] c, int64[2] lens, float[2,6,8,8] bn, float[2,6,8,8] y, float[2,6,4,4] p, int64[2,6,4,4] idx>
{{
  a = Conv <pads=[1,1,1,1]> (input, w0)
  r = Relu (a)
  n = Conv <pads=[1,1,1,1]> (r, w1)
  c, lens = com.microsoft.ConcatTraining <axis=1> (r, n)
  bn, rm, rv, sm, sis = com.microsoft.BatchNormInternal <epsilon=0.00001, momentum=0.9> (c, scale, bias, mean, var)
  y = Relu (bn)
  p, idx = MaxPool <kernel_shape=[2,2], strides=[2,2]> (y)
  z = Conv <pads=[1,1,1,1]> (p, w2)
  loss = ReduceSum <keepdims=0> (z)
  z_shape = Shape (z)
  dz = Expand (loss_grad, z_shape)
  dp, w2_grad, db2 = com.microsoft.ConvGrad <{_CONV}> (dz, p, w2)
  dy = MaxPoolGrad (dp, idx)
  dbn = com.microsoft.ReluGrad (dy, y)
  dc, dscale, dbias = com.microsoft.BatchNormalizationGrad <epsilon=0.00001> (dbn, c, scale, sm, sis)
  dr1, dn = com.microsoft.SplitTraining <axis=1> (dc, lens)
  dr2, w1_grad, db1 = com.microsoft.ConvGrad <{_CONV}> (dn, r, w1)
  dr = Add (dr1, dr2)
  da = com.microsoft.ReluGrad (dr, r)
  dinput, w0_grad, db0 = com.microsoft.ConvGrad <{_CONV}> (da, input, w0)
  w2_out = com.microsoft.InPlaceAccumulatorV2 (w2_buf, w2_grad, lazy_reset_grad)
  w1_out = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
  w0_out = com.microsoft.InPlaceAccumulatorV2 (w0_buf, w0_grad, lazy_reset_grad)
}}
"""


@pytest.mark.parametrize("text", ["pinned", "dense", "two_conv", "conv_pool"])
def test_recompute_tables_from_one_analysis_equal_the_runs_records(text: str) -> None:
    """``_recomputable`` answers every question with ``RecomputePass.plan_table`` on one analysis: the same
    tables as one whole ``RecomputePass.run`` per question (the way it was made before), in every variant."""
    from graphs import CONV_POOL
    from onnxcomp.planner import memo
    from onnxcomp.planner.auto import _recomputable

    model = parse({"pinned": _PINNED, "dense": _DENSE, "two_conv": TWO_CONV, "conv_pool": CONV_POOL}[text])
    for alone, extend in ((True, True), (True, False), (False, True), (False, False)):
        with memo.planning_session():
            new = _recomputable(model, alone=alone, extend=extend)
        old = _recomputable_by_runs(model, alone=alone, extend=extend)
        assert {t: {k: tuple(v) for k, v in d.items()} for t, d in new.items()} == \
            {t: {k: tuple(v) for k, v in d.items()} for t, d in old.items()}
        assert any(new.values()), "the graph offers no recomputation: the comparison would test nothing"


def test_plan_table_answers_each_stash_alone_as_the_pass_records_it() -> None:
    """The primitive: per stash asked for alone (and all together), the table and skips are the run's."""
    from onnxcomp.analysis import analyze_model
    from onnxcomp.passes import RecomputePass
    from onnxcomp.passes.recompute import CHEAP_OPS

    model = parse(_DENSE)
    analysis = analyze_model(model)
    names = [s.name for s in analysis.stashed]
    for tensors in [None, *([n] for n in names), names]:
        for fraction in (0.0, 0.5):
            p = RecomputePass(tensors=tensors, ops=CHEAP_OPS | {"Conv"}, extend_fraction=fraction)
            table, skipped = p.plan_table(analysis)
            res = p.run(model)
            assert table == {r.subject: (r.detail["cloned_ops"], r.detail["inputs_kept"], r.detail["inputs_extended"])
                             for r in res.records if r.kind == "recomputed"}
            assert [(s.name, s.reason) for s in skipped] == [(s.name, s.reason) for s in res.skipped]
