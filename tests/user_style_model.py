"""A "user-style" model (issue 12's first finding), not from the zoo: convs with BatchNorm/ReLU, a MaxPool, a
residual add and a Linear head; trained at batch 16, 48×48. Its step peak sits in the stem's backward.

Used by tests/test_chunk_policies.py and, as ``--module user_style_model:UserNet`` (PYTHONPATH=tests), by the
measurements in docs/chunking.md."""
from __future__ import annotations

from torch import nn


class UserNet(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.block = nn.Sequential(nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                                   nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w))
        self.relu = nn.ReLU()
        self.head = nn.Sequential(nn.Conv2d(w, 2 * w, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(2 * w),
                                  nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * w, num_classes))

    def forward(self, x):  # noqa: ANN001, ANN201
        x = self.pool(self.stem(x))
        return self.head(self.relu(x + self.block(x)))
