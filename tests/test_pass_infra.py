"""The pass infrastructure on onnx-ir (passes.base, analysis.cached) and the passes that had no unit test on a
hand-written graph (DeferWeightGradientPass, SplitWeightPass). Fast: onnx.parser graphs, no ORT session."""
from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from graphs import two_conv, two_fc

import onnxcomp.analysis.cached as cached
from onnxcomp.analysis import analysis_of
from onnxcomp.analysis.training_graph import GRAD_BUFFER_SUFFIX
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import DeferWeightGradientPass, EagerAccumulationPass, SignBitsPass, SplitWeightPass
from onnxcomp.passes.base import (OnnxcompPass, PassOutcome, PassPostconditionError, PassPreconditionError,
                                  check_model, run_passes)
from onnxcomp.passes.defer_weight_grad import GATE_SUFFIX
from onnxcomp.passes.records import PassRecord
from onnxcomp.passes.split_weight import splits_made
from onnxcomp.transform import transform_model


def _ir(model: onnx.ModelProto) -> ir.Model:
    return ir.serde.deserialize_model(model)


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the analyses the cache computes."""
    calls: list[int] = []
    real = cached.analyze_ir

    def counting(model: ir.Model, *args: object, **kwargs: object):
        calls.append(1)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(cached, "analyze_ir", counting)
    return calls


class _Touch(OnnxcompPass):
    """Reports ``modified`` as told, changing nothing (to see what the infrastructure does with it)."""
    name = "touch"

    def __init__(self, modified: bool) -> None:
        self.modified = modified

    def call(self, model: ir.Model) -> PassOutcome:
        return PassOutcome(model, self.modified)


class _NewPass(OnnxcompPass):
    """A brand-new pass written outside onnxcomp: renames the first node and records it."""
    name = "new_pass"

    def call(self, model: ir.Model) -> PassOutcome:
        next(iter(model.graph)).name = "renamed_by_new_pass"
        return PassOutcome(model, True, [PassRecord("moved", self.name, "x", {"tensor": "x"})])


def test_pass_manager_composes_passes_and_collects_every_record() -> None:
    model = _ir(two_conv())
    log = run_passes(model, [EagerAccumulationPass(), SignBitsPass(native=False), _NewPass()])
    order = ["eager_accumulation", "signbits", "new_pass"]
    names = [r.pass_name for r in log.records]
    assert set(names) == set(order) and names == sorted(names, key=order.index)   # in pass order
    assert log.modified_by == ["eager_accumulation", "signbits", "new_pass"]
    out = cached.snapshot_of(model)
    check_model(out, "composed")
    assert out.graph.node[0].name == "renamed_by_new_pass"
    assert any(n.op_type.startswith("OnnxcompEncode") for n in out.graph.node)
    assert "onnxcomp.run_log" not in model.meta          # the sink lives for the run only


def test_a_new_pass_works_in_a_transform_unchanged() -> None:
    result = transform_model(two_conv(), "reorder", passes=[_NewPass(), EagerAccumulationPass()])
    assert result.modified_by[:2] == ["new_pass", "eager_accumulation"]   # then transform's default_order
    assert result.model.graph.node[0].name == "renamed_by_new_pass"
    assert result.section("moved")[0] == {"tensor": "x"}


def test_requires_refuses_an_inference_graph_in_one_line() -> None:
    forward_only = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        infer (float[2,3] x) => (float[2,3] y) { y = Relu (x) }""")
    with pytest.raises(PassPreconditionError) as info:
        EagerAccumulationPass()(_ir(forward_only))
    assert str(info.value).startswith("eager_accumulation pass: ") and "\n" not in str(info.value)
    # Through the pass manager and transform: the same one-line onnxcomp error, not onnx-ir's wrapper.
    with pytest.raises(OnnxcompError) as info:
        transform_model(forward_only, "reorder")
    assert "no backward pass found" in str(info.value) and "\n" not in str(info.value)


def test_requires_static_parameter_shapes_where_the_pass_needs_them() -> None:
    model = two_fc()
    model.graph.input[2].type.tensor_type.shape.dim[0].dim_param = "n"   # w2: [n, 64]
    with pytest.raises(PassPreconditionError, match="parameter 'w2' has no static shape"):
        DeferWeightGradientPass()(_ir(model))


class _UngatedClone(OnnxcompPass):
    """Puts a clone of the forward Relu at the end of the graph, reading only forward tensors: it could run
    during forward, which is exactly what ``ensures`` must refuse."""
    name = "ungated"

    def call(self, model: ir.Model) -> PassOutcome:
        relu = next(n for n in model.graph if n.op_type == "Relu")
        clone = ir.Node("", "Relu", [relu.inputs[0]], name="Relu__recompute", num_outputs=1)
        clone.outputs[0].name = "y__recomputed"
        model.graph.append(clone)
        return PassOutcome(model, True)


def test_ensures_refuses_an_ungated_clone_in_one_line() -> None:
    with pytest.raises(PassPostconditionError) as info:
        _UngatedClone()(_ir(two_conv()))
    assert "'Relu__recompute'" in str(info.value) and "\n" not in str(info.value)


def test_ensures_runs_the_checker_on_what_the_pass_made() -> None:
    class Miswired(OnnxcompPass):
        name = "miswired"

        def call(self, model: ir.Model) -> PassOutcome:
            flag = next(v for v in model.graph.inputs if v.name == "lazy_reset_grad")
            bad = ir.Node("", "Add", [model.graph.inputs[0], flag], name="bad_add", num_outputs=1)
            bad.outputs[0].name = "bad"
            model.graph.append(bad)        # float + bool: the type check refuses it
            return PassOutcome(model, True)

    with pytest.raises(PassPostconditionError, match="miswired pass: the rewritten graph failed onnx.checker"):
        Miswired()(_ir(two_conv()))


def test_the_analysis_is_cached_and_dropped_only_on_modified(analyses: list[int]) -> None:
    model = _ir(two_conv())
    first = analysis_of(model)
    assert analysis_of(model) is first and len(analyses) == 1
    _Touch(modified=False)(model)
    assert analysis_of(model) is first and len(analyses) == 1          # unmodified: the same analysis
    _Touch(modified=True)(model)
    assert analysis_of(model) is not first and len(analyses) == 2      # modified: analysed again
    # A pass reading analysis_of(snapshot) of the model's own snapshot gets the cached analysis, not a new one.
    seen = []

    class Reader(OnnxcompPass):
        name = "reader"

        def call(self, model: ir.Model) -> PassOutcome:
            seen.append(analysis_of(cached.snapshot_of(model)))
            return PassOutcome(model, False)

    Reader()(model)
    assert seen == [analysis_of(model)] and len(analyses) == 2


def test_honest_modified_false_on_a_no_op(analyses: list[int]) -> None:
    model = _ir(two_conv())
    assert EagerAccumulationPass()(model).modified
    before = analysis_of(model)
    again = EagerAccumulationPass()(model)
    assert not again.modified and not again.records and analysis_of(model) is before
    nothing = DeferWeightGradientPass()(model)        # two_conv: ConvGrad makes dW with dX, nothing to defer
    assert not nothing.modified and analysis_of(model) is before


def _index(model: onnx.ModelProto) -> dict[str, int]:
    return {o: k for k, n in enumerate(model.graph.node) for o in n.output if o}


def test_defer_weight_grad_gates_dw_on_the_last_gradient_and_moves_it_behind() -> None:
    result = DeferWeightGradientPass(min_bytes=0, force=True).run(two_fc())
    out = result.model
    check_model(out, "defer")
    (rec,) = result.records
    # w2's dW (the Gemm reading dz and r) waits for w1's gradient, the one computed last.
    assert rec.kind == "deferred" and rec["after"] == "w1_grad" and rec["gradient_bytes"] == 32 * 64 * 4
    made, nodes = _index(out), list(out.graph.node)
    dw = nodes[made["w2_grad"]]
    gated = dw.input[0]
    assert gated == "dz" + GATE_SUFFIX and nodes[made[gated]].op_type == "Reshape"
    assert made["w2_grad"] > made["w1_grad"]                               # runs after the anchor
    gate_nodes = nodes[made["w1_grad"] + 1: made["w2_grad"]]
    assert {"Less", "Slice", "Reshape"} <= {n.op_type for n in gate_nodes}
    slice_ = next(n for n in gate_nodes if n.op_type == "Slice")
    assert nodes[made[slice_.input[0]]].input[0] == "w1_grad"             # Less(t, t) on one element of w1_grad
    acc = next(k for k, n in enumerate(nodes) if n.op_type == "InPlaceAccumulatorV2" and n.input[1] == "w2_grad")
    assert acc == made["w2_grad"] + 1                                      # its accumulator right behind it
    # A re-run defers nothing more.
    again = DeferWeightGradientPass(min_bytes=0, force=True).run(out)
    assert not again.modified and not again.records


def test_defer_weight_grad_leaves_small_gradients_and_asks_the_planner() -> None:
    assert not DeferWeightGradientPass().run(two_fc()).modified          # 8 KiB < the 1 MiB default
    result = DeferWeightGradientPass(min_bytes=0).run(two_fc())
    decided = result.records or result.skipped
    assert decided and all("predicted_peak_before" in r.detail for r in result.records)
    assert all("predicted peak" in s.reason for s in result.skipped)


def test_split_weight_splits_the_fc_weights_into_row_blocks() -> None:
    model = two_fc()
    assert not SplitWeightPass().run(model).modified                      # off unless asked
    result = SplitWeightPass(2048).run(model)
    out = result.model
    check_model(out, "split")
    splits = {s.parameter: s for s in splits_made(result)}
    assert splits["w2"].bounds == (0, 8, 16, 24, 32) and splits["w2"].shape == (32, 64)
    assert splits["w1"].bounds == (0, 32, 64)
    inputs = {i.name for i in out.graph.input}
    for split in splits.values():
        assert split.parameter not in inputs and split.parameter + GRAD_BUFFER_SUFFIX not in inputs
        assert set(split.parts) <= inputs and {p + GRAD_BUFFER_SUFFIX for p in split.parts} <= inputs
    nodes = list(out.graph.node)
    assert not any(name in n.input for name in splits for n in nodes)
    # Forward: one Gemm per block, concatenated; backward: each block's dW Gemm with its accumulator behind.
    assert sum(n.op_type == "Concat" for n in nodes) == 2
    for part in splits["w2"].parts:
        acc = next(k for k, n in enumerate(nodes) if n.op_type == "InPlaceAccumulatorV2"
                   and n.input[0] == part + GRAD_BUFFER_SUFFIX)
        assert nodes[acc - 1].op_type == "Gemm" and nodes[acc - 1].output[0] == nodes[acc].input[1]
    # dX of the second layer is summed over its four blocks.
    dx_gemms = [n for n in nodes if n.op_type == "Gemm" and any(p in n.input for p in splits["w2"].parts)
                and n.input[0] != "r"]
    assert len(dx_gemms) == 4
    again = SplitWeightPass(2048).run(out)
    assert not again.modified and splits_made(again) == []
