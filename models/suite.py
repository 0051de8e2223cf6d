"""An architecture suite of our own, beyond the torchvision-like zoo: six nets of different shape.

Each exercises a graph feature the zoo lacks, so the passes meet stashes they were not tuned on:

================  ==========================================================  ==========
name              shape                                                       image
================  ==========================================================  ==========
squeezenet_s      SqueezeNet-like fire modules (1x1 squeeze, 1x1 ‖ 3x3 expand    48
                  concatenated), ceil-mode max pools, conv classifier
densenet_s        DenseNet-like dense blocks (BN-ReLU-1x1-BN-ReLU-3x3, every     40
                  layer's output concatenated onto its input), transitions
leaky_vgg         VGG-like with BatchNorm and LeakyReLU(0.1) / PReLU (as Relu     56
                  ops: ORT has no PRelu gradient)
plain_deep        BN-free deep plain VGG-like (12 conv + ReLU, no shortcut)      48
mobilenet_v1_s    depthwise-separable (MobileNetV1-like, width 0.5)              56
wide_resnet_s     wide residual net (WRN-10-4, pre-activation)                   40
================  ==========================================================  ==========

The image sizes are deliberately not powers of two (odd feature maps after pooling: 3, 5, 7, ...). ``width``
scales every channel count (tests build narrow copies; the benchmark uses 1.0). Every net is a plain
``nn.Module`` in training mode and exports with the legacy exporter like the zoo (static shapes).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .architectures import _SizeChecked


def _ch(c: int, width: float) -> int:
    return max(4, int(round(c * width)))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
        self.expand1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU(inplace=True))
        self.expand3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.expand1(s), self.expand3(s)], 1)


class SqueezeNetS(_SizeChecked):
    """SqueezeNet 1.1-like: fire modules between ceil-mode max pools, a 1x1 conv classifier, no BatchNorm."""

    min_image_size = 24
    suite_image = 48

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        c = lambda v: _ch(v, width)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, c(64), 3, stride=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(c(64), c(16), c(64)), Fire(c(128), c(16), c(64)), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(c(128), c(32), c(128)), Fire(c(256), c(32), c(128)), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(c(256), c(48), c(192)), Fire(c(384), c(64), c(256)),
        )
        self.classifier = nn.Sequential(nn.Conv2d(c(512), num_classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        return torch.flatten(self.classifier(self.features(x)), 1)


class _PooledLinearHead(_SizeChecked):
    """features, global average pool, one linear classifier: the shape four suite nets end in."""

    def _head(self, mods: list[nn.Module], channels: int, num_classes: int) -> None:
        self.features = nn.Sequential(*mods)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                  nn.BatchNorm2d(4 * growth), nn.ReLU(inplace=True),
                                  nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


class DenseNetS(_PooledLinearHead):
    """DenseNet-BC-like: stem, three dense blocks of four layers (growth 12), transitions halving channels."""

    min_image_size = 16
    suite_image = 40

    def __init__(self, num_classes: int = 1000, width: float = 1.0, growth: int = 12, layers: int = 4) -> None:
        super().__init__()
        g = _ch(growth, width)
        c = 2 * g
        mods: list[nn.Module] = [nn.Conv2d(3, c, 3, padding=1, bias=False)]
        for block in range(3):
            for _ in range(layers):
                mods.append(DenseLayer(c, g))
                c += g
            if block < 2:
                mods += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                         nn.AvgPool2d(2)]
                c //= 2
        mods += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
        self._head(mods, c, num_classes)


class PReLU(nn.Module):
    """PReLU written as ``relu(x) - a * relu(-x)`` (per channel a): ORT-training 1.19.2 registers no gradient
    for the ONNX PRelu op ("The gradient builder has not been registered: PRelu"), so nn.PReLU cannot train."""

    def __init__(self, channels: int, init: float = 0.25) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((channels, 1, 1), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) - self.weight * torch.relu(-x)


class LeakyVGG(_PooledLinearHead):
    """VGG-like, Conv-BN-LeakyReLU(0.1) in the first stages and Conv-BN-PReLU in the last, max pools."""

    min_image_size = 16
    suite_image = 56

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        cfg = [(32, "leaky"), (32, "leaky"), "M", (64, "leaky"), (64, "leaky"), "M", (128, "prelu"),
               (128, "prelu"), "M", (256, "prelu"), "M"]
        mods: list[nn.Module] = []
        cin = 3
        for item in cfg:
            if item == "M":
                mods.append(nn.MaxPool2d(2))
                continue
            cout, act = item
            cout = _ch(cout, width)
            mods += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                     nn.LeakyReLU(0.1, inplace=True) if act == "leaky" else PReLU(cout)]
            cin = cout
        self._head(mods, cin, num_classes)


class PlainDeep(_PooledLinearHead):
    """BN-free deep plain net: 12 Conv3x3+ReLU (He init, no shortcut, no normalisation), four max pools."""

    min_image_size = 16
    suite_image = 48

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        stages = [(32, 3), (64, 3), (128, 3), (256, 3)]
        mods: list[nn.Module] = []
        cin = 3
        for cout, reps in stages:
            cout = _ch(cout, width)
            for _ in range(reps):
                conv = nn.Conv2d(cin, cout, 3, padding=1)
                nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
                nn.init.zeros_(conv.bias)
                mods += [conv, nn.ReLU(inplace=True)]
                cin = cout
            mods.append(nn.MaxPool2d(2))
        self._head(mods, cin, num_classes)


def _dw_separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False), nn.BatchNorm2d(cin),
        nn.ReLU(inplace=True),
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class MobileNetV1S(_PooledLinearHead):
    """MobileNetV1 at width 0.5: a strided stem, then 3x3 depthwise + 1x1 pointwise blocks (BN, ReLU)."""

    min_image_size = 16
    suite_image = 56

    def __init__(self, num_classes: int = 1000, width: float = 1.0) -> None:
        super().__init__()
        c = lambda v: _ch(v * 0.5, width)  # noqa: E731
        cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (1024, 2)]
        mods: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, c(32), 3, stride=2, padding=1, bias=False),
                                               nn.BatchNorm2d(c(32)), nn.ReLU(inplace=True))]
        cin = c(32)
        for cout, stride in cfg:
            mods.append(_dw_separable(cin, c(cout), stride))
            cin = c(cout)
        self._head(mods, cin, num_classes)


class WideBlock(nn.Module):
    """Pre-activation basic block of a wide ResNet (BN-ReLU-Conv twice, 1x1 projection when shapes change)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.relu = nn.ReLU(inplace=False)
        self.shortcut = None if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = self.relu(self.bn1(x))
        skip = x if self.shortcut is None else self.shortcut(o)
        y = self.conv1(o)
        y = self.conv2(self.relu(self.bn2(y)))
        return y + skip


class WideResNetS(_SizeChecked):
    """WRN-10-4: a 3x3 stem, three groups of one wide block (16k, 32k, 64k channels, k = 4)."""

    min_image_size = 8
    suite_image = 40

    def __init__(self, num_classes: int = 1000, width: float = 1.0, k: int = 4) -> None:
        super().__init__()
        w = [_ch(16, width), _ch(16 * k, width), _ch(32 * k, width), _ch(64 * k, width)]
        self.stem = nn.Conv2d(3, w[0], 3, padding=1, bias=False)
        self.blocks = nn.Sequential(WideBlock(w[0], w[1], 1), WideBlock(w[1], w[2], 2), WideBlock(w[2], w[3], 2))
        self.bn = nn.BatchNorm2d(w[3])
        self.relu = nn.ReLU(inplace=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(w[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        x = self.relu(self.bn(self.blocks(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


SUITE_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "squeezenet_s": SqueezeNetS,
    "densenet_s": DenseNetS,
    "leaky_vgg": LeakyVGG,
    "plain_deep": PlainDeep,
    "mobilenet_v1_s": MobileNetV1S,
    "wide_resnet_s": WideResNetS,
}
SUITE_NAMES: tuple[str, ...] = tuple(SUITE_BUILDERS)
# Batch sizes of the suite benchmark: small, and not all alike.
SUITE_BATCH: dict[str, int] = {"squeezenet_s": 16, "densenet_s": 8, "leaky_vgg": 16, "plain_deep": 8,
                               "mobilenet_v1_s": 16, "wide_resnet_s": 8}


def suite_image(name: str) -> int:
    """The (odd-sized) square input side the suite uses for ``name``."""
    return int(SUITE_BUILDERS[name].suite_image)  # type: ignore[attr-defined]


def build_suite_model(name: str, num_classes: int = 1000, width: float = 1.0) -> nn.Module:
    """A suite net by registry key, with every channel count scaled by ``width``."""
    return SUITE_BUILDERS[name](num_classes=num_classes, width=width)
