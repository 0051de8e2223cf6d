"""Each pass on a small hand-written training graph (tests/graphs.py): what it inserts, where, and what
it reports. Fast: no torch export, no ORT session."""
from __future__ import annotations

import onnx
import pytest
from graphs import conv_pool, two_conv

from onnxcomp.analysis import analyze_model
from onnxcomp.custom_ops import contract
from onnxcomp.passes import (POLICIES, DprPass, EagerAccumulationPass, ErrorBoundedPass, MaxPoolIndexPass,
                             RecomputePass, SignBitsPass, SparsePass)
from onnxcomp.passes.base import check_model
from onnxcomp.passes.records import SECTIONS, PassRecord
from onnxcomp.transform import transform_model


def _index(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> index of the node producing it."""
    return {o: k for k, n in enumerate(model.graph.node) for o in n.output if o}


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def _ours(model: onnx.ModelProto, role: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if (op := contract.codec_op(n.domain, n.op_type)) and op.role == role]


def _upstream(model: onnx.ModelProto, tensor: str) -> set[str]:
    """Every tensor ``tensor`` is computed from (itself included)."""
    made = _index(model)
    seen, todo = set(), [tensor]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in made:
            todo += [i for i in model.graph.node[made[t]].input if i]
    return seen


def test_signbits_encodes_after_the_relu_and_decodes_just_before_relugrad() -> None:
    model = two_conv()
    original = model.SerializeToString()
    result = SignBitsPass(native=False).run(model)  # the PyOp path (native bits: tests/test_native_bits.py)
    assert model.SerializeToString() == original                    # the input is never mutated
    out = result.model
    check_model(out, "signbits")
    (rec,) = result.records
    assert isinstance(rec, PassRecord) and rec.kind == "encoded" and rec.subject == "x" and result.modified
    # Relu is x's only forward reader; ORT tests y > 0 in the graph and the bitmask codec packs the booleans
    assert rec["codec"] == "bitmask" and rec["encoded_tensor"] == "y"
    (enc,), (dec,) = _ours(out, "encode"), _ours(out, "decode")
    made = _index(out)
    nodes = list(out.graph.node)
    # Greater(y, 0) right after the Relu, the encoder right after it (reading the bool mask, not the float y),
    # and the second Conv reads y through the encoder's anchor.
    test = nodes[made[enc.input[contract.ENCODER_INPUT]]]
    assert test.op_type == "Greater" and test.input[0] == "y" and nodes.index(test) == made["y"] + 1
    assert nodes.index(enc) == made["y"] + 2
    conv2 = _node(out, "Conv_2")
    anchor = enc.output[contract.ENCODER_ANCHOR]
    assert nodes[made[conv2.input[0]]].op_type == "Reshape" and nodes[made[conv2.input[0]]].input[1] == anchor
    # Decoder timed by ReluGrad's incoming gradient dy, placed just before ReluGrad, which reads the mask.
    relu_grad = _node(out, "ReluGrad_7")
    assert "dy" in _upstream(out, dec.input[contract.DECODER_TRIGGER])
    assert made[relu_grad.input[1]] < nodes.index(relu_grad) and nodes.index(dec) < nodes.index(relu_grad)
    assert dec.output[0] in _upstream(out, relu_grad.input[1]) and "x" not in relu_grad.input
    assert {p.key: p.value for p in out.metadata_props}[contract.OPSET_METADATA_KEY] == str(contract.OPSET_VERSION)


def test_maxpool_index_anchors_the_pooled_values() -> None:
    # The PyOp form (the native one, standard ops only, is tests/test_native_pool.py's)
    result = MaxPoolIndexPass(native=False).run(conv_pool())
    out = result.model
    check_model(out, "maxpool_index")
    (rec,) = result.records
    assert rec["tensor"] == "idx" and rec["codec"] == "maxpool_index"
    assert rec["params"]["input_shape"] == [2, 4, 8, 8] and rec["params"]["kernel_shape"] == [2, 2]
    (enc,) = _ours(out, "encode")
    made = _index(out)
    loss = next(n for n in out.graph.node if n.op_type == "ReduceSum")
    # The indices have no forward reader: the pooled values' reader waits for the encoder instead.
    assert enc.input[0] == "idx" and enc.output[-1] in out.graph.node[made[loss.input[0]]].input
    pool_grad = next(n for n in out.graph.node if n.op_type == "MaxPoolGrad")
    assert pool_grad.input[1] == _ours(out, "decode")[0].output[0]
    assert rec["predicted_bytes"] < analyze_model(conv_pool()).tensors["idx"].nbytes


@pytest.mark.parametrize("make, codec", [(lambda: SparsePass(min_bytes=0), "sparse"),
                                         (lambda: DprPass("bf16", min_bytes=0), "dpr_bf16"),
                                         (lambda: ErrorBoundedPass(eb=1e-2, min_bytes=0), "sz")])
def test_float_codecs_take_the_conv_input(make, codec: str) -> None:  # noqa: ANN001
    result = make().run(two_conv())
    out = result.model
    check_model(out, codec)
    (rec,) = [r for r in result.records if r["tensor"] == "y"]
    assert rec["codec"] == codec
    (dec,) = _ours(out, "decode")
    conv_grad = _node(out, "ConvGrad_6")
    assert conv_grad.input[1] == dec.output[0]
    assert "dz" in _upstream(out, dec.input[contract.DECODER_TRIGGER])    # timed by ConvGrad's dY
    if codec == "sz":   # the bound controller's handles, and dY's scale through a ReduceL2 trigger
        # (sz's payload size depends on the data: the payload store holds it, ORT carries a token frame)
        assert rec["params"] | {"dy_numel": 0} == {"eb": 1e-2, "key": "y", "weight": "w2", "batch": 2,
                                                   "adaptive": True, "dy_numel": 0, "tensor": "y",
                                                   "store": "inline"}
        assert rec["params"]["dy_numel"] == 2 * 4 * 8 * 8
        assert any(n.op_type == "ReduceL2" and n.input[0] == "dz" for n in out.graph.node)


def test_native_fp16_uses_onnx_ops_only() -> None:
    result = DprPass(min_bytes=0).run(two_conv())
    out = result.model
    check_model(out, "dpr")
    assert not _ours(out, "encode") and result.records[0]["native"] == "fp16"
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert {onnx.helper.get_attribute_value(c.attribute[0]) for c in casts} >= {onnx.TensorProto.FLOAT16,
                                                                               onnx.TensorProto.FLOAT}


def test_recompute_clones_the_relu_gated_by_the_gradient() -> None:
    result = RecomputePass(min_bytes=0).run(two_conv())
    out = result.model
    (rec,) = result.records
    assert rec.kind == "recomputed" and rec["tensor"] == "y" and rec["cloned_ops"] == ["Relu"]
    assert rec["inputs_kept"] == ["x"]
    conv_grad = _node(out, "ConvGrad_6")
    made = _index(out)
    clone = out.graph.node[made[conv_grad.input[1]]]
    assert clone.op_type == "Relu" and clone.name != "Relu_1"
    # The clone reads x through a view that needs dz: it cannot run in the forward pass.
    assert "dz" in _upstream(out, clone.input[0]) and "x" in _upstream(out, clone.input[0])
    assert "y" not in {s.name for s in analyze_model(out).stashed}


def test_eager_accumulation_reports_modified_honestly() -> None:
    model = two_conv()
    first = EagerAccumulationPass().run(model)
    assert first.modified and {r.kind for r in first.records} == {"moved"}
    nodes = list(first.model.graph.node)
    acc = next(k for k, n in enumerate(nodes) if n.op_type == "InPlaceAccumulatorV2" and n.input[1] == "w2_grad")
    assert nodes[acc - 1].op_type == "ConvGrad" and "w2_grad" in nodes[acc - 1].output
    again = EagerAccumulationPass().run(first.model)
    assert not again.modified and not again.records
    assert [n.name for n in again.model.graph.node] == [n.name for n in first.model.graph.node]


@pytest.mark.parametrize("policy", ["lossless", "lossless-encode", "comet", "dpr-fp8", "reorder"])
def test_policies_on_a_small_graph_report_in_one_schema(policy: str) -> None:
    result = transform_model(two_conv(), policy, min_bytes=0)
    check_model(result.model, policy)
    last = {"masked_fill", "early_encode", "default_order", "arena_scratch", "reuse_signature",
            "declare_shapes"}   # transform's last passes
    names = {p.make.name for p in POLICIES[policy]} | last
    assert result.all_records and all(r.kind in SECTIONS and r.pass_name in names for r in result.all_records)
    assert set(result.modified_by) == {r.pass_name for r in result.all_records}
    assert [r["tensor"] for r in result.records] == [r.subject for r in result.records]
    summary = result.summary()
    assert summary["encoded"] == len(result.records) and summary["moved"] == result.section("moved")
