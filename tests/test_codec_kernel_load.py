"""The codec kernels are loaded after the parsed training graph is freed (runtime/_measure_worker.py): its freed
heap then goes to the kernels' long-lived allocations instead of staying as holes under them that every training
step touches again (docs/notes/lossygrowth.md: mobilenet_v1_s's lossy plan grew 16.7 → 13.3 MiB under ORT's
defaults, same set-up RSS)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
from onnx import helper

from onnxcomp.custom_ops import cpu
from onnxcomp.runtime import _measure_worker


def _graph_with_a_codec(path: Path) -> None:
    node = helper.make_node("OnnxcompEncode_zfp", ["X"], ["P"], domain="ai.onnx.contrib")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("P", onnx.TensorProto.UINT8, [4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("ai.onnx.contrib", 1)]), str(path))


def test_the_parsed_graph_is_gone_before_the_kernels_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    _graph_with_a_codec(path)
    alive: list[bool] = []
    real_load = onnx.load

    class Tracked:
        """Stands for the parsed model: records when it is freed."""
        def __init__(self, model: onnx.ModelProto) -> None:
            self._nodes = list(model.graph.node)
            alive.append(True)

        @property
        def graph(self) -> SimpleNamespace:
            # like a protobuf sub-message, the graph keeps its model alive
            return SimpleNamespace(node=self._nodes, owner=self)

        def __del__(self) -> None:
            alive[0] = False

    monkeypatch.setattr(onnx, "load", lambda *a, **k: Tracked(real_load(*a, **k)))
    seen: list[tuple[list[str], bool]] = []
    monkeypatch.setattr(cpu, "warm_up", lambda codecs=None: seen.append((list(codecs), alive[0])))
    _measure_worker._load_codec_kernels(path)
    assert seen == [(["zfp"], False)]


def test_a_graph_without_codecs_loads_no_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(graph), str(path))
    called: list[object] = []
    monkeypatch.setattr(cpu, "warm_up", lambda codecs=None: called.append(codecs))
    _measure_worker._load_codec_kernels(path)
    assert called == []
