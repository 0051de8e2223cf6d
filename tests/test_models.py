"""Model zoo: exact parameter counts, forward shapes, the exportable adaptive pool, ONNX training export."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
import torch
from torch.nn import functional as F

from onnxcomp.errors import OnnxcompError
from onnxcomp.models import MODEL_NAMES, TRANSFORMER_NAMES, build_model, count_parameters, list_models, min_image_size
from onnxcomp.models.architectures import AdaptiveAvgPool2d
from onnxcomp.models.export import export_training_onnx

# torchvision's published counts at 1000 classes
TORCHVISION_PARAMS = {
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
}
SMALL_IMAGE = {"alexnet": 64, "vgg16": 32, "resnet18": 32, "resnet50": 32, "mobilenet_v2": 32}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_parameter_count_matches_torchvision(name: str) -> None:
    with torch.device("meta"):
        model = build_model(name, 1000)
    assert count_parameters(model) == TORCHVISION_PARAMS[name]


def test_list_models_is_instant_and_exact() -> None:
    list_models()  # first call pays for imports
    start = time.perf_counter()
    listing = list_models()
    assert time.perf_counter() - start < 2.0
    assert [m["name"] for m in listing] == [*MODEL_NAMES, *TRANSFORMER_NAMES]
    assert {m["name"]: m["parameters"] for m in listing if m["name"] in MODEL_NAMES} == TORCHVISION_PARAMS


def test_num_classes_changes_only_the_classifier() -> None:
    with torch.device("meta"):
        ten = count_parameters(build_model("resnet18", 10))
    assert TORCHVISION_PARAMS["resnet18"] - ten == (1000 - 10) * (512 + 1)


def test_unknown_model_name_lists_the_choices() -> None:
    with pytest.raises(OnnxcompError, match="resnet18"):
        build_model("vgg19")


def test_bad_num_classes_is_a_user_error() -> None:
    with pytest.raises(OnnxcompError):
        build_model("resnet18", 0)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_shape_on_small_images(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, 10)
    image = SMALL_IMAGE[name]
    out = model(torch.randn(2, 3, image, image))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()


def test_too_small_image_names_the_minimum() -> None:
    assert min_image_size("alexnet") == 63
    model = build_model("alexnet", 10)
    model(torch.randn(1, 3, 63, 63))  # the smallest that works
    with pytest.raises(OnnxcompError, match="63x63"):
        model(torch.randn(1, 3, 32, 32))
    with pytest.raises(OnnxcompError, match="32x32"):
        build_model("vgg16", 10).check_image_size(16, 16)


@pytest.mark.parametrize(
    "height, width, out",
    [(1, 1, (7, 7)), (2, 2, (7, 7)), (3, 5, (6, 6)), (10, 13, (7, 7)), (14, 14, (7, 7)), (9, 9, (6, 4))],
)
def test_adaptive_pool_equals_torch(height: int, width: int, out: tuple[int, int]) -> None:
    x = torch.randn(2, 3, height, width, dtype=torch.float64, requires_grad=True)
    ours = AdaptiveAvgPool2d(out)(x)
    ref = F.adaptive_avg_pool2d(x, out)
    torch.testing.assert_close(ours, ref)
    g = torch.randn_like(ref)
    (grad_ours,) = torch.autograd.grad(ours, x, g)
    (grad_ref,) = torch.autograd.grad(ref, x, g)
    torch.testing.assert_close(grad_ours, grad_ref)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
def test_adaptive_pool_exports_where_torch_op_cannot(tmp_path) -> None:
    """torchvision's (7,7) pool fails to export from a 2x2 map; ours exports and matches."""
    import onnxruntime as ort

    x = torch.randn(2, 512, 2, 2)
    path = tmp_path / "pool.onnx"
    with pytest.raises(Exception):
        torch.onnx.export(torch.nn.AdaptiveAvgPool2d((7, 7)), (x,), tmp_path / "ref.onnx", dynamo=False, opset_version=17)
    torch.onnx.export(AdaptiveAvgPool2d((7, 7)), (x,), path, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x.numpy()})
    np.testing.assert_allclose(y, F.adaptive_avg_pool2d(x, (7, 7)).numpy(), rtol=1e-6, atol=1e-6)


def _node_types(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]


def test_export_resnet18_keeps_batchnorm_in_training_mode(tmp_path) -> None:
    model = build_model("resnet18", 10)
    path = export_training_onnx(model, 2, 32, 10, tmp_path / "r18.onnx")
    graph = onnx.load(str(path)).graph
    bns = [n for n in graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 20
    assert all(next(a.i for a in n.attribute if a.name == "training_mode") == 1 for n in bns)
    assert [i.name for i in graph.input] == ["input"]
    assert [o.name for o in graph.output] == ["logits"]
    dims = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 32, 32]
    initializers = {i.name for i in graph.initializer}
    assert {n for n, _ in model.named_parameters()} <= initializers
    assert model.training


def test_export_dynamic_batch_axis(tmp_path) -> None:
    path = export_training_onnx(build_model("mobilenet_v2", 10), 2, 32, 10, tmp_path / "m.onnx", dynamic_batch=True)
    dim0 = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    assert dim0.dim_param and not dim0.dim_value


def test_export_alexnet_at_64_uses_matmul_pooling(tmp_path) -> None:
    # AlexNet's features shrink a 64x64 image to 1x1, which the (6,6) adaptive pool has to upsample.
    path = export_training_onnx(build_model("alexnet", 10), 2, 64, 10, tmp_path / "a.onnx")
    types = _node_types(path)
    assert types.count("MatMul") == 2 and "Dropout" in types


def test_export_rejects_mismatched_classes_and_tiny_images(tmp_path) -> None:
    with pytest.raises(OnnxcompError, match="classes"):
        export_training_onnx(build_model("resnet18", 10), 2, 32, 100, tmp_path / "x.onnx")
    with pytest.raises(OnnxcompError, match="63"):
        export_training_onnx(build_model("alexnet", 10), 2, 32, 10, tmp_path / "x.onnx")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_export_vgg16_at_32(tmp_path) -> None:
    path = export_training_onnx(build_model("vgg16", 10), 2, 32, 10, tmp_path / "v.onnx")
    assert _node_types(path).count("MatMul") == 2


def test_model_names_are_forgiving_about_case_and_separators() -> None:
    from onnxcomp.models import canonical_name

    assert canonical_name("ResNet-18") == "resnet18"
    assert canonical_name("MobileNetV2") == "mobilenet_v2"
    assert canonical_name("VGG16") == "vgg16"
