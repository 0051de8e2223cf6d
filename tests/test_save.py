"""Serialising a transformed graph: atomic, self-contained, and with external data where protobuf's 2 GiB
limit would bite (exercised here with a low threshold)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

from onnxcomp.errors import OnnxcompError
from onnxcomp.load import has_external_data, save_model


def _with_weight() -> onnx.ModelProto:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 256] x) => (float[4, 256] y) { y = Add(x, w) }
    """)
    w = np.arange(4 * 256, dtype=np.float32).reshape(4, 256)
    model.graph.initializer.append(numpy_helper.from_array(w, "w"))
    return model


def test_small_models_stay_one_file(tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    assert save_model(_with_weight(), out) == [out]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    assert not has_external_data(onnx.load(str(out), load_external_data=False))


def test_large_models_go_to_external_data_and_load_back(tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    written = save_model(_with_weight(), out, external_threshold=1024)
    assert written == [out, tmp_path / "m.onnx.data"] and written[1].stat().st_size >= 4 * 256 * 4
    assert has_external_data(onnx.load(str(out), load_external_data=False))
    back = onnx.load(str(out))
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]),
                                  numpy_helper.to_array(_with_weight().graph.initializer[0]))
    assert not list(tmp_path.glob(".*.tmp"))                     # nothing half-written left behind


def test_external_data_of_the_input_is_carried_over(tmp_path: Path) -> None:
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir(), out_dir.mkdir()
    save_model(_with_weight(), src_dir / "m.onnx", external_threshold=0)
    model = onnx.load(str(src_dir / "m.onnx"), load_external_data=False)   # what load_model reads
    with pytest.raises(OnnxcompError, match="external data"):
        save_model(model, out_dir / "copy.onnx")
    save_model(model, out_dir / "copy.onnx", source_dir=src_dir)
    (src_dir / "m.onnx.data").unlink()                          # the copy must not need the input's files
    copy = onnx.load(str(out_dir / "copy.onnx"))
    np.testing.assert_array_equal(numpy_helper.to_array(copy.graph.initializer[0]),
                                  numpy_helper.to_array(_with_weight().graph.initializer[0]))
