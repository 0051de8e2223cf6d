"""Small nets whose activations ORT differentiates through sign or interval tests only: LeakyReLU, ReLU6,
and HardSigmoid / HardSwish written as ``relu6(x + 3) / 6`` (ORT 1.19 has no HardSigmoid/HardSwish gradient:
generate_artifacts fails on the ONNX ops), plus Dropout. Used by tests/test_coverage.py and, through
``onnxcomp artifacts --module coverage_nets:MobileNetV3Tiny`` (PYTHONPATH=tests), by docs/notes/coverage.md."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def hardsigmoid(x: torch.Tensor) -> torch.Tensor:
    return F.relu6(x + 3.0) / 6.0


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int = 4) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, max(4, c // r), 1), nn.Conv2d(max(4, c // r), c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class Block(nn.Module):
    """MobileNetV3 inverted residual: 1x1 expand, 3x3 depthwise, SE, 1x1 project; HardSwish or ReLU6."""

    def __init__(self, cin: int, cexp: int, cout: int, stride: int, act: str) -> None:
        super().__init__()
        self.act = act
        self.expand = nn.Sequential(nn.Conv2d(cin, cexp, 1, bias=False), nn.BatchNorm2d(cexp))
        self.dw = nn.Sequential(nn.Conv2d(cexp, cexp, 3, stride, 1, groups=cexp, bias=False), nn.BatchNorm2d(cexp))
        self.se = SqueezeExcite(cexp)
        self.project = nn.Sequential(nn.Conv2d(cexp, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        return x * hardsigmoid(x) if self.act == "hswish" else F.relu6(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.se(self._act(self.dw(self._act(self.expand(x))))))
        return x + y if self.residual else y


class MobileNetV3Tiny(nn.Module):
    """A small MobileNetV3-style net (ReLU6 and HardSwish blocks, SE with HardSigmoid, Dropout head)."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w))
        self.blocks = nn.Sequential(Block(w, 4 * w, w, 1, "relu6"), Block(w, 4 * w, 2 * w, 2, "hswish"),
                                    Block(2 * w, 6 * w, 2 * w, 1, "hswish"))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(2 * w, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x * hardsigmoid(x)
        x = F.adaptive_avg_pool2d(self.blocks(x), 1)
        return self.head(x)


class ActivationMix(nn.Module):
    """Conv-BN-LeakyReLU-MaxPool, Conv-ReLU6, Conv-HardSigmoid gate, Conv-HardSwish, MaxPool, Dropout, Linear.
    (The pool after the LeakyReLU makes LeakyReluGrad its output's only backward reader.)"""

    def __init__(self, num_classes: int = 10, c: int = 8, image: int = 8) -> None:
        super().__init__()
        self.c1, self.bn1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2, self.c3, self.c4 = (nn.Conv2d(c, c, 3, padding=1) for _ in range(3))
        self.fc = nn.Linear(c * (image // 4) ** 2, num_classes)
        self.drop = nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.leaky_relu(self.bn1(self.c1(x)), 0.1), 2)
        x = F.relu6(self.c2(x))
        x = x * hardsigmoid(self.c3(x))
        h = self.c4(x)
        x = F.max_pool2d(h * hardsigmoid(h), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))
