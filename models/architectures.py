"""AlexNet, VGG-16, ResNet-18/50 and MobileNetV2 in plain PyTorch, laid out like torchvision's.

Module names, layer order and initialisation follow torchvision, so parameter counts (and state_dict keys)
match it exactly. The one deliberate difference is ``AdaptiveAvgPool2d``: torchvision's op only exports to
ONNX (TorchScript exporter) when the input map size is a multiple of the output size, which rules out small
images in AlexNet and VGG. Ours computes the same numbers and exports for any size.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from onnxcomp.errors import OnnxcompError


def _pool_matrix(in_size: int, out_size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Row i averages input cells [floor(i*in/out), ceil((i+1)*in/out)), exactly as adaptive_avg_pool does."""
    # Built as a Python list so tracing records one Constant, not a chain of slice assignments.
    rows = []
    for i in range(out_size):
        start = (i * in_size) // out_size
        end = -(-((i + 1) * in_size) // out_size)
        rows.append([1.0 / (end - start) if start <= j < end else 0.0 for j in range(in_size)])
    return torch.tensor(rows, dtype=dtype, device=device)


class AdaptiveAvgPool2d(nn.Module):
    """Drop-in for ``nn.AdaptiveAvgPool2d`` that exports to ONNX for every input size.

    When each output size divides its input size the ordinary op is used (it exports as AveragePool or
    GlobalAveragePool). Otherwise the pooling is written as two constant averaging matrices,
    ``y = P_h @ x @ P_w^T``, which is the same arithmetic and exports as MatMul. Parameter-free, so
    parameter counts are unchanged.
    """

    def __init__(self, output_size: int | tuple[int, int]) -> None:
        super().__init__()
        self.output_size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_h, in_w = int(x.shape[-2]), int(x.shape[-1])
        out_h, out_w = self.output_size
        if in_h % out_h == 0 and in_w % out_w == 0:
            return F.adaptive_avg_pool2d(x, self.output_size)
        p_h = _pool_matrix(in_h, out_h, x.dtype, x.device)
        p_w = _pool_matrix(in_w, out_w, x.dtype, x.device)
        return torch.matmul(torch.matmul(p_h, x), p_w.t())

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _SizeChecked(nn.Module):
    """Base for the zoo: rejects images smaller than the architecture can take, with the minimum size."""

    #: smallest square input side (pixels) for which every layer has a non-empty output
    min_image_size: int = 1

    def check_image_size(self, height: int, width: int) -> None:
        if min(height, width) < self.min_image_size:
            raise OnnxcompError(
                f"{type(self).__name__} needs images of at least {self.min_image_size}x{self.min_image_size} "
                f"pixels, got {height}x{width}; use a larger --image size"
            )

    def _check_input(self, x: torch.Tensor) -> None:
        # Skipped while tracing: sizes are static there and the exporter calls check_image_size itself.
        if not torch.jit.is_tracing():
            self.check_image_size(int(x.shape[-2]), int(x.shape[-1]))


class _FeaturesPoolClassifier(_SizeChecked):
    """AlexNet / VGG layout: ``features`` → ``avgpool`` → flatten → ``classifier``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# --------------------------------------------------------------------------------------------------- AlexNet


class AlexNet(_FeaturesPoolClassifier):
    # conv1 (k11 s4 p2) then three k3 s2 max-pools: 63 px is the smallest input leaving a 1x1 map.
    min_image_size = 63

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )


# ----------------------------------------------------------------------------------------------------- VGG-16

_VGG16_CFG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)


class VGG(_FeaturesPoolClassifier):
    # five 2x2 stride-2 max-pools
    min_image_size = 32

    def __init__(
        self, cfg: tuple[int | str, ...] = _VGG16_CFG, num_classes: int = 1000, dropout: float = 0.5
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(in_channels, int(v), kernel_size=3, padding=1), nn.ReLU(inplace=True)]
                in_channels = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)


def vgg16(num_classes: int = 1000) -> VGG:
    return VGG(_VGG16_CFG, num_classes=num_classes)


# ----------------------------------------------------------------------------------------------------- ResNet


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    # torchvision's v1.5 bottleneck: the stride sits on the 3x3 conv.
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(_SizeChecked):
    # strided convs/pools all have padding, so even a 1x1 image keeps a 1x1 map
    min_image_size = 1

    def __init__(
        self, block: type[BasicBlock] | type[Bottleneck], layers: tuple[int, int, int, int], num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(
        self, block: type[BasicBlock] | type[Bottleneck], planes: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes=num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes=num_classes)


# ------------------------------------------------------------------------------------------------ MobileNetV2


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:  # never round down by more than 10%
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    """Conv -> BatchNorm -> ReLU6, torchvision's building block (same child indices 0, 1, 2)."""

    def __init__(self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups: int = 1) -> None:
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1))
        layers += [
            Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(_SizeChecked):
    min_image_size = 1

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2) -> None:
        super().__init__()
        round_nearest = 8
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        # t (expansion), c (channels), n (repeats), s (first stride)
        settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                    [6, 320, 1, 1]]
        features: list[nn.Module] = [Conv2dNormActivation(3, input_channel, stride=2)]
        for t, c, n, s in settings:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.avgpool = AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        x = self.features(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.classifier(x)


def alexnet(num_classes: int = 1000) -> AlexNet:
    return AlexNet(num_classes=num_classes)


def mobilenet_v2(num_classes: int = 1000) -> MobileNetV2:
    return MobileNetV2(num_classes=num_classes)


BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "alexnet": alexnet,
    "vgg16": vgg16,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
}

__all__ = [
    "AdaptiveAvgPool2d", "AlexNet", "VGG", "ResNet", "BasicBlock", "Bottleneck", "MobileNetV2",
    "InvertedResidual", "Conv2dNormActivation", "alexnet", "vgg16", "resnet18", "resnet50", "mobilenet_v2",
    "BUILDERS",
]
