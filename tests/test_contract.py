"""The custom-op contract: one definition of op names, slots, params keys and the op-set version."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from onnxcomp.custom_ops import REGISTRY, contract
from onnxcomp.errors import OnnxcompError
from onnxcomp.load import load_model, require_compatible_opset
from onnxcomp.runtime import codec_ops, controller


def test_codec_ops_are_looked_up_in_the_registry_not_by_prefix() -> None:
    for name in REGISTRY:
        assert contract.codec_op(contract.DOMAIN, contract.encode_op(name)) == contract.CodecOp("encode", name)
        assert contract.is_decoder(contract.DOMAIN, contract.decode_op(name), name)
        assert not contract.is_encoder(contract.DOMAIN, contract.decode_op(name))
    # Looks like ours but no codec of that name exists, or sits in another domain: not ours.
    assert contract.codec_op(contract.DOMAIN, contract.ENCODE_PREFIX + "no_such_codec") is None
    assert contract.codec_op("", contract.encode_op("sz")) is None
    # The runtime registers exactly the contract's op types.
    assert codec_ops.op_type_names("sz") == (contract.encode_op("sz"), contract.decode_op("sz"))
    assert codec_ops.CONTROL_PARAMS is contract.CONTROL_PARAMS


def test_params_round_trip_and_control_keys_stripped() -> None:
    params = {"eb": 1e-3, "key": "x", "weight": "w", "batch": 4, "adaptive": True, "dy_numel": 10}
    value = contract.params_value(params)
    assert contract.parse_params(value.encode()) == params
    assert contract.codec_params(params) == {"eb": 1e-3}


def _graph_with_opset(version: str | None) -> onnx.ModelProto:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) { y = Relu(x) }
    """)
    if version is not None:
        onnx.helper.set_model_props(model, {contract.OPSET_METADATA_KEY: version})
    return model


def test_incompatible_opset_is_refused_in_one_line(tmp_path: Path) -> None:
    require_compatible_opset(_graph_with_opset(None))          # pre-contract graphs are version 1
    require_compatible_opset(_graph_with_opset(str(contract.OPSET_VERSION)))
    with pytest.raises(OnnxcompError, match="custom-op set version 99"):
        require_compatible_opset(_graph_with_opset("99"), "m.onnx")
    path = tmp_path / "future.onnx"
    onnx.save(_graph_with_opset("99"), str(path))
    with pytest.raises(OnnxcompError, match="version 99"):
        load_model(path)
    proc = subprocess.run([sys.executable, "-m", "onnxcomp", "inspect", str(path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "version 99" in lines[0] and "transform the original" in lines[0]


def test_controller_reads_bounded_encoders_through_the_contract() -> None:
    params = contract.params_value({"eb": 0.01, "key": "k", "weight": "w", "batch": 8, "adaptive": False})
    enc = onnx.helper.make_node(contract.encode_op(controller.BOUNDED_CODEC), ["x"], ["p", "a"],
                                domain=contract.DOMAIN, params=params)
    other_domain = onnx.helper.make_node(contract.encode_op(controller.BOUNDED_CODEC), ["x"], ["q", "b"],
                                         domain="elsewhere", params=params)
    graph = onnx.helper.make_graph([enc, other_domain], "g", [], [])
    layers = controller.bounded_layers(onnx.helper.make_model(graph))
    assert [(l.key, l.weight, l.batch, l.eb0, l.adaptive) for l in layers] == [("k", "w", 8, 0.01, False)]


def test_transformed_graph_records_its_opset(small_artifacts: Path) -> None:
    from onnxcomp.transform import transform_model

    from onnxcomp.passes import MaxPoolIndexPass

    model = load_model(small_artifacts).model
    # lossless-encode holds this net's stashes natively (sign bits, MaxPool indices: standard ops); the PyOp
    # form of the MaxPool indices gives codec ops to check the params attribute on.
    for out in (transform_model(model, "lossless-encode").model, MaxPoolIndexPass(native=False).run(model).model):
        props = {p.key: p.value for p in out.metadata_props}
        assert props[contract.OPSET_METADATA_KEY] == str(contract.OPSET_VERSION)
        assert any(o.domain == contract.DOMAIN for o in out.opset_import)
    ours = [n for n in out.graph.node if contract.codec_op(n.domain, n.op_type)]
    assert ours and all(contract.PARAMS_ATTR in {a.name for a in n.attribute} for n in ours)
