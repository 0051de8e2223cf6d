"""The analysis on onnx-ir (``analyze_ir``, ``analysis_of``) on small hand-written graphs: what it finds,
that it reads the ir model's use/def links and types (no serialisation, shape inference only for values never
inferred), and that it finds what the ModelProto entry point finds (fast)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from graphs import conv_pool, parse, two_conv, two_fc
from onnxcomp.analysis import TensorClass, analysis_of, analyze_ir, analyze_model, find_boundary, shapes
from onnxcomp.analysis import cached
from onnxcomp.analysis.execution_order import in_run_order
from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import SignBitsPass
from onnxcomp.planner.predict import planned_peak, predicted_live, predicted_peak


def _ir(model: onnx.ModelProto) -> ir.Model:
    return ir.serde.deserialize_model(model)


@pytest.fixture
def inferences(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the runs of ONNX shape inference (the protobuf path) the analysis makes."""
    calls: list[int] = []
    real = shapes.resolve_shapes

    def counting(*args: object, **kwargs: object):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(shapes, "resolve_shapes", counting)
    return calls


def test_two_conv_stashes_classes_and_lifetimes() -> None:
    a = analyze_ir(_ir(two_conv()))
    assert {s.name: s.pattern for s in a.stashed} == {"x": "Relu-input→ReluGrad", "y": "Relu-output→ConvGrad",
                                                      "z_shape": "Shape-output→Expand"}
    assert a.tensors["w1"].cls is TensorClass.PARAMETER and a.tensors["input"].cls is TensorClass.INPUT
    assert a.tensors["w1_grad.accumulation.buffer"].cls is TensorClass.GRAD_BUFFER
    assert a.tensors["dy"].cls is TensorClass.GRADIENT_MAP and a.tensors["loss"].cls is TensorClass.IMMEDIATE
    x = a.tensors["x"]
    assert x.shape == (2, 4, 8, 8) and x.nbytes == 2 * 4 * 8 * 8 * 4
    names = [n.name for n in a.ir_nodes]
    assert x.producer == 0 and x.consumers == [1, 7]             # Relu, then ReluGrad in backward
    assert a.lifetime("x") == (0, 7) and a.boundary.first_backward == 5 and a.boundary.seeds == ["lazy_reset_grad", "loss_grad"]
    assert len(names) == a.n_steps == 11
    assert a.data_inputs == ["input", "loss_grad"] and a.batch == 2 and not a.unresolved


def test_pool_indices_and_aliases() -> None:
    a = analyze_ir(_ir(conv_pool()))
    idx = next(s for s in a.stashed if s.name == "idx")
    assert idx.encodings == ("maxpool_index",) and idx.dtype == "int64" and idx.shape == (2, 4, 4, 4)
    assert idx.backward_consumer_ops == ["MaxPoolGrad"]
    fc = analyze_ir(_ir(two_fc()))
    # an accumulator writes into its buffer: its flag aliases the buffer, which persists (no transient buffer)
    outs = ("w1_grad.accumulation.out", "w2_grad.accumulation.out")
    assert all(fc.tensors[o].alias_of is not None for o in outs) and all(b.name not in outs for b in fc.buffers())


def test_the_proto_entry_point_finds_the_same() -> None:
    for make in (two_conv, conv_pool, two_fc):
        proto = make()
        a, b = analyze_ir(_ir(proto)), analyze_model(proto)
        assert list(a.tensors) == list(b.tensors)
        assert [(t.cls, t.type, t.producer, t.consumers, t.alias_of) for t in a.tensors.values()] == \
            [(t.cls, t.type, t.producer, t.consumers, t.alias_of) for t in b.tensors.values()]
        assert [(s.name, s.pattern, s.encodings, s.use) for s in a.stashed] == \
            [(s.name, s.pattern, s.encodings, s.use) for s in b.stashed]
        assert b.model is proto                          # the proto it was handed, not a serialisation


def test_uses_def_links_not_names(inferences: list[int]) -> None:
    """Consumers come from the values' uses: a rewire with ``replace_input_with`` shows in the next analysis."""
    model = _ir(two_conv())
    before = analyze_ir(model)
    relu_grad = next(n for n in model.graph if n.op_type == "ReluGrad")
    relu = next(n for n in model.graph if n.op_type == "Relu")
    relu_grad.replace_input_with(1, relu.outputs[0])     # ReluGrad reads y (the output) instead of x
    after = analyze_ir(model)
    assert "x" in {s.name for s in before.stashed} and "x" not in {s.name for s in after.stashed}
    assert after.tensors["x"].cls is TensorClass.IMMEDIATE and after.tensors["y"].consumers == [2, 6, 7]


def test_shape_inference_runs_once_per_value(inferences: list[int]) -> None:
    model = _ir(two_conv())
    first = analyze_ir(model)                  # the parser types only the graph's inputs: inference once
    assert len(inferences) == 1
    again = analyze_ir(model)                  # every value typed or inferred before: no inference
    assert len(inferences) == 1 and again.tensors["z"].type == first.tensors["z"].type
    clone = model.clone()                      # the clone carries what was inferred
    analyze_ir(clone)
    assert len(inferences) == 1
    # A pass's new values the editor left without a static shape (the decoder's trigger) are inferred once.
    assert SignBitsPass()(model).modified
    analysis_of(model)
    assert len(inferences) == 2
    cached.invalidate(model)
    analysis_of(model)
    assert len(inferences) == 2


def test_the_cached_analysis_serialises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _ir(two_conv())
    analyze_ir(model)                           # types inferred (one serialisation, for ONNX inference)
    cached.invalidate(model)
    serialised: list[int] = []
    real = ir.serde.serialize_model
    monkeypatch.setattr(ir.serde, "serialize_model", lambda m: serialised.append(1) or real(m))
    a = analysis_of(model)
    assert a.stashed and not serialised
    assert a.model.graph.node[a.tensors["x"].producer].op_type == "Conv" and len(serialised) == 1   # on demand
    assert cached.snapshot_of(model) is a.model and len(serialised) == 1          # one proto per state


def test_the_proto_view_refuses_an_edited_graph() -> None:
    model = _ir(two_conv())
    a = analyze_ir(model)
    model.graph.remove(next(n for n in model.graph if n.op_type == "ReduceSum"), safe=False)
    with pytest.raises(RuntimeError, match="read after the graph was edited"):
        a.model


def test_another_batch_infers_every_shape_again() -> None:
    proto = two_conv()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"     # a dynamic batch
    a = analyze_ir(_ir(proto), batch=5)
    assert a.batch == 5 and a.tensors["x"].shape == (5, 4, 8, 8)
    assert analyze_ir(_ir(proto)).tensors["x"].shape is None


def test_boundary_on_ir_and_inference_graph_refused() -> None:
    model = _ir(two_conv())
    b = find_boundary(model.graph)
    assert b.forward == [0, 1, 2, 3, 4] and b.backward == [5, 6, 7, 8, 9, 10]
    assert find_boundary(two_conv().graph).backward == b.backward          # a GraphProto: the same
    inference = parse("""
<ir_version: 8, opset_import: ["" : 17]>
infer (float[2,3] x) => (float[2,3] y) { y = Relu (x) }
""")
    with pytest.raises(OnnxcompError, match="no backward pass found"):
        analyze_ir(_ir(inference))


def test_training_op_rules_fill_untyped_outputs() -> None:
    """ORT's training ops have no ONNX schema: their outputs get shapes from the rules (``X_grad`` is X's)."""
    a = analyze_ir(_ir(two_conv()))
    assert a.tensors["dx"].shape == a.tensors["x"].shape == (2, 4, 8, 8)
    assert a.tensors["w1_grad"].shape == (4, 3, 3, 3) and a.tensors["db1"].shape == (4,)


def test_planner_entry_points_take_the_ir_model() -> None:
    proto = two_conv()
    model = _ir(proto)
    seen, live = predicted_live(model)
    assert isinstance(seen, ir.Model) and seen is not model and len(live) == len(seen.graph)
    assert predicted_peak(model) == predicted_peak(proto) > 0
    assert predicted_peak(model, eager_accumulation=False) == predicted_peak(proto, eager_accumulation=False)
    for order in ("priority", "default"):
        assert planned_peak(model, order) == planned_peak(proto, order)
        run = in_run_order(proto, order)
        assert int(np.max(predicted_live(run, eager_accumulation=False)[1])) > 0


# CONV_POOL with the pool recomputed in backward for its indices only (as a row-split block does): its values r
# are read by nothing; the forward pool's output p has an unread view (Flatten) beside its readers.
_UNREAD = """
<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
train (float[2,3,8,8] input, float[4,3,3,3] w1, float[4,3,3,3] w1_buf, bool lazy_reset_grad, float loss_grad)
      => (bool w1_flag)
{
  x = Conv <pads=[1,1,1,1]> (input, w1)
  y = Relu (x)
  p = MaxPool <kernel_shape=[2,2], strides=[2,2]> (y)
  p_flat = Flatten (p)
  loss = ReduceSum <keepdims=0> (p)
  p_shape = Shape (p)
  dp = Expand (loss_grad, p_shape)
  r, ridx = MaxPool <kernel_shape=[2,2], strides=[2,2]> (y)
  dy = MaxPoolGrad (dp, ridx)
  dx = com.microsoft.ReluGrad (dy, x)
  dinput, w1_grad = com.microsoft.ConvGrad <pads=[1,1,1,1], strides=[1,1], kernel_shape=[3,3]> (dx, input, w1)
  w1_flag = com.microsoft.InPlaceAccumulatorV2 (w1_buf, w1_grad, lazy_reset_grad)
}
"""


def test_an_unread_buffer_is_held_to_the_end_of_the_step() -> None:
    model = parse(_UNREAD)
    model.graph.node[-2].output[0] = ""          # ORT's gradient graph leaves the input's gradient out
    a = analyze_ir(_ir(model))
    last = a.n_steps - 1
    spans = {b.name: (b.start, b.end) for b in a.buffers()}
    # ORT frees a buffer after its last reader only: the unread pool values stay allocated to the step's end.
    assert a.unread("r") and spans["r"] == (a.tensors["r"].producer, last)
    assert not a.unread("ridx") and spans["ridx"][1] == a.tensors["ridx"].consumers[-1] < last
    # A view's producer reads the buffer it views: an unread view does not hold its buffer to the end.
    assert a.tensors["p_flat"].alias_of == "p" and "p_flat" not in spans and spans["p"][1] < last
    # The accumulator writes into the persistent gradient buffer; its flag is a graph output.
    assert not a.unread("w1_flag")
    _, live = predicted_live(model, eager_accumulation=False)
    r_bytes = a.tensors["r"].nbytes
    assert r_bytes == 2 * 4 * 4 * 4 * 4
    # At the last step (the accumulator) r and the unread loss are still allocated beside the weight gradient the
    # accumulator reads.
    assert a.unread("loss") and live[last] == r_bytes + a.tensors["loss"].nbytes + a.tensors["w1_grad"].nbytes
