"""Training-graph analysis on a small BN CNN (fast) and on every zoo model (slow marker for the big ones)."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from onnxcomp.analysis import TensorClass, analyze, analyze_model
from onnxcomp.errors import OnnxcompError
from onnxcomp.planner import lower_bound


def check_invariants(a) -> None:
    """Properties every analysis must satisfy, whatever the model."""
    graph = a.model.graph
    assert a.stashed, "a training graph always stashes something for backward"
    assert not a.unresolved, f"unresolved shapes: {a.unresolved[:5]}"
    bwd = set(a.boundary.backward)
    assert bwd and a.boundary.forward and min(bwd) > min(a.boundary.forward)
    for s in a.stashed:
        t = a.tensors[s.name]
        assert t.cls is TensorClass.STASHED
        assert t.producer is not None and t.producer not in bwd
        assert s.backward_consumers and all(c in bwd for c in s.backward_consumers)
        assert s.nbytes > 0 and "→" in s.pattern
    for name, t in a.tensors.items():
        if t.producer is None:
            continue
        start, end = a.lifetime(name)
        assert start <= end < len(graph.node)
        assert all(c > t.producer for c in t.consumers), f"{name} consumed before it is produced"
        in_bwd = t.producer in bwd
        if t.cls in (TensorClass.STASHED, TensorClass.IMMEDIATE):
            assert not in_bwd
        if t.cls is TensorClass.GRADIENT_MAP:
            assert in_bwd
        if t.cls is TensorClass.IMMEDIATE:
            assert not any(c in bwd for c in t.consumers)
    buffers = a.buffers()
    assert lower_bound(buffers) > 0
    total = sum(a.breakdown().values())
    assert total == sum(t.nbytes for t in a.tensors.values() if t.alias_of is None)


def test_small_cnn_patterns(small_artifacts: Path) -> None:
    a = analyze(small_artifacts)
    check_invariants(a)
    patterns = {s.pattern for s in a.stashed}
    assert {"Relu-input→ReluGrad", "MaxPool-indices→MaxPoolGrad", "Conv-output→BatchNormalizationGrad",
            "MaxPool-output→ConvGrad"} <= patterns
    by_pattern = {s.pattern: s for s in a.stashed}
    assert by_pattern["Relu-input→ReluGrad"].encodings == ("signbits",)
    assert by_pattern["MaxPool-indices→MaxPoolGrad"].encodings == ("maxpool_index",)
    assert by_pattern["MaxPool-indices→MaxPoolGrad"].dtype == "int64"
    assert "sparse" in by_pattern["MaxPool-output→ConvGrad"].encodings
    assert "sparse" not in by_pattern["Conv-output→BatchNormalizationGrad"].encodings
    # The ReLU output itself is not stashed (ReluGrad reads the input), and parameters are classified.
    relu_out = [n.output[0] for n in a.model.graph.node if n.op_type == "Relu"]
    assert all(a.tensors[r].cls is TensorClass.IMMEDIATE for r in relu_out)
    assert any(t.cls is TensorClass.PARAMETER for t in a.tensors.values())
    assert any(t.cls is TensorClass.GRAD_BUFFER for t in a.tensors.values())


def test_batch_override_scales_bytes(small_artifacts: Path) -> None:
    a = analyze(small_artifacts)
    b = analyze(small_artifacts, batch=3 * a.batch)
    check_invariants(b)
    assert b.batch == 3 * a.batch
    sa = {s.name: s.nbytes for s in a.stashed}
    sb = {s.name: s.nbytes for s in b.stashed}
    big = [n for n in sa if len(a.tensors[n].shape or ()) == 4]
    assert big and all(sb[n] == 3 * sa[n] for n in big)


def test_inference_graph_is_refused(small_artifacts: Path) -> None:
    eval_model = onnx.load(str(small_artifacts / "eval_model.onnx"))
    with pytest.raises(OnnxcompError, match="inference-only"):
        analyze_model(eval_model)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "alexnet",
                                  pytest.param("vgg16", marks=pytest.mark.slow),
                                  pytest.param("resnet50", marks=pytest.mark.slow)])
def test_zoo_model_analysis(name: str, tmp_path: Path) -> None:
    from onnxcomp.models.artifacts import generate_artifacts

    image = 64 if name == "alexnet" else 32
    out = generate_artifacts(name, 2, image, 10, tmp_path / name, smoke_test=False)
    a = analyze(out.out_dir)
    check_invariants(a)
    patterns = {s.pattern for s in a.stashed}
    assert "Relu-input→ReluGrad" in patterns or name == "mobilenet_v2"
    assert any(p.endswith("→ConvGrad") for p in patterns)
