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


# ----------------------------------------------------------------------------------- transform with external data
_C = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)


def _training_graph_with_constant(tmp: Path) -> Path:
    """tests/graphs.py's TWO_FC with a constant initializer added to its first weight, saved the way large
    models are: the initializer in ``in.onnx.data`` beside ``in.onnx``."""
    from graphs import TWO_FC, parse

    text = TWO_FC.replace("h = Gemm <transB=1> (input, w1)", "w1c = Add (w1, c)\n  h = Gemm <transB=1> (input, w1c)")
    model = parse(text)
    c = _C.copy()
    model.graph.initializer.append(numpy_helper.from_array(c, "c"))
    path = tmp / "in.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="in.onnx.data",
              size_threshold=0)
    return path


def _constant(path: Path) -> np.ndarray:
    model = onnx.load(str(path))   # reads the external data relative to the model's directory
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "c"))


def _tree(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def test_transform_writes_graph_and_data_as_a_set_and_never_touches_the_input(tmp_path: Path) -> None:
    from onnxcomp.errors import OutputExistsError
    from onnxcomp.load import external_data_files
    from onnxcomp.transform import transform

    src = tmp_path / "src"
    src.mkdir()
    model_in = _training_graph_with_constant(src)
    expected = _constant(model_in)
    before = _tree(src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "t.onnx"

    # Forced through the external-data path: the threshold stands in for protobuf's 2 GiB.
    transform(model_in, out, "lossless", external_threshold=1)
    assert external_data_files(out) == {"t.onnx.data"}
    np.testing.assert_array_equal(_constant(out), expected)
    assert sorted(p.name for p in out_dir.iterdir()) == ["t.onnx", "t.onnx.data", "t.plan.json"]
    assert _tree(src) == before                                    # the input's graph and data, byte for byte

    with pytest.raises(OutputExistsError):
        transform(model_in, out, "lossless", external_threshold=1)
    assert external_data_files(out) == {"t.onnx.data"}

    # Replacing the set: the new data goes under a name the old graph does not use, then the graph is
    # swapped in; the old data file goes afterwards.
    transform(model_in, out, "lossless", force=True, external_threshold=1)
    assert external_data_files(out) == {"t.onnx.1.data"}
    np.testing.assert_array_equal(_constant(out), expected)
    assert sorted(p.name for p in out_dir.iterdir()) == ["t.onnx", "t.onnx.1.data", "t.plan.json"]

    # Below the threshold the output is one self-contained file again; the data file it replaced goes.
    transform(model_in, out, "lossless", force=True)
    assert external_data_files(out) == set() and sorted(p.name for p in out_dir.iterdir()) == ["t.onnx", "t.plan.json"]
    np.testing.assert_array_equal(_constant(out), expected)
    assert _tree(src) == before


def test_transform_over_its_own_input_keeps_the_input_data(tmp_path: Path) -> None:
    from onnxcomp.load import external_data_files
    from onnxcomp.transform import transform

    model_in = _training_graph_with_constant(tmp_path)
    data_before = (tmp_path / "in.onnx.data").read_bytes()
    transform(model_in, model_in, "lossless", force=True, external_threshold=1)
    assert external_data_files(model_in) == {"in.onnx.1.data"}       # in.onnx.data is the input's: kept
    assert (tmp_path / "in.onnx.data").read_bytes() == data_before
    np.testing.assert_array_equal(_constant(model_in), _C)


def test_exclusive_save_leaves_no_data_file_behind(tmp_path: Path) -> None:
    from onnxcomp.errors import OutputExistsError

    out = tmp_path / "m.onnx"
    out.write_bytes(b"someone else's file")
    with pytest.raises(OutputExistsError):
        save_model(_with_weight(), out, external_threshold=1024, replace=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"] and out.read_bytes() == b"someone else's file"
