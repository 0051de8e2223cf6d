"""Row geometry of a conv chain: layers, their row windows, padding and per-row bytes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from ...errors import OnnxcompError


MS_DOMAIN = "com.microsoft"
VARIANTS = ("overl", "2ps")
# Forward op -> (backward op type, its domain).
GRAD_OPS: dict[str, tuple[str, str]] = {
    "Conv": ("ConvGrad", MS_DOMAIN),
    "Relu": ("ReluGrad", MS_DOMAIN),
    "LeakyRelu": ("LeakyReluGrad", MS_DOMAIN),
    "MaxPool": ("MaxPoolGrad", ""),
    "AveragePool": ("AveragePoolGrad", ""),
}
_AUTO_R_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def _attrs(node: ir.Node) -> dict[str, Any]:
    return {name: attr.value for name, attr in node.attributes.items()}


@dataclass
class Layer:
    """One forward op of a chain and its backward op, with its row geometry (NCHW, rows = axis 2)."""

    fwd: ir.Node
    grad: ir.Node
    x: ir.Value                 # T_{l-1}
    y: ir.Value                 # T_l
    x_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    k: int = 1                  # effective kernel height ((K-1)*dilation + 1)
    s: int = 1                  # row stride
    pt: int = 0                 # top padding
    pb: int = 0                 # bottom padding
    grad_reads_y: bool = False  # Relu/LeakyRelu backward reading the output instead of the input
    ws_row_bytes: int = 0       # ConvGrad im2col bytes per output row (one image)

    @property
    def kind(self) -> str:
        return self.fwd.op_type

    @property
    def h_in(self) -> int:
        return self.x_shape[2]

    @property
    def h_out(self) -> int:
        return self.y_shape[2]

    def need(self, a: int, b: int) -> tuple[int, int]:
        """Input rows [ia, ib) that output rows [a, b) read (clamped to the real image)."""
        return max(0, a * self.s - self.pt), min(self.h_in, (b - 1) * self.s - self.pt + self.k)

    def pads(self, a: int, b: int) -> tuple[int, int, int, int]:
        """(ia, ib, top, bottom): the window and the semi-closed pads that make a clone produce exactly
        output rows [a, b): real padding only where the window runs past the true border."""
        ia, ib = self.need(a, b)
        top = self.pt + ia - a * self.s
        bottom = (b - 1) * self.s - self.pt + self.k - ib
        if top < 0 or bottom < 0:
            raise OnnxcompError(f"row geometry of {self.fwd.name!r}: negative pad for rows [{a}, {b})")
        return ia, ib, top, bottom

    def row_bytes(self, which: str) -> int:
        shp = self.x_shape if which == "x" else self.y_shape
        return int(np.prod(shp, dtype=np.int64)) // shp[2] * 4

    @property
    def has_params(self) -> bool:
        return self.kind == "Conv"

    @property
    def label(self) -> str:
        """How records name the layer: its forward node's name, else its output's."""
        return self.fwd.name or self.y.name


@dataclass
class Chain:
    layers: list[Layer]
    segments: list[tuple[int, int]] = field(default_factory=list)   # [i, j) layer index ranges

    @property
    def name(self) -> str:
        return self.layers[0].label

    @property
    def input(self) -> ir.Value:
        return self.layers[0].x


# ------------------------------------------------------------------------------------------- chain finding

def _geometry(node: ir.Node, w_shape: tuple[int, ...] | None) -> tuple[int, int, int, int] | str:
    """(k, s, pt, pb) of a 2-D conv/pool along rows, or why the op can't be split."""
    a = _attrs(node)
    if node.op_type in ("Relu", "LeakyRelu"):
        return 1, 1, 0, 0
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"auto_pad={a['auto_pad']}"
    if a.get("ceil_mode", 0):
        return "ceil_mode=1"
    if node.op_type == "MaxPool" and a.get("storage_order", 0):
        return "storage_order=1"
    kernel = a.get("kernel_shape") or (list(w_shape[2:]) if w_shape else None)
    if not kernel or len(kernel) != 2:
        return "not a 2-D op"
    strides = a.get("strides") or [1, 1]
    dil = a.get("dilations") or [1, 1]
    pads = a.get("pads") or [0, 0, 0, 0]
    if a.get("auto_pad", "NOTSET") == "VALID":
        pads = [0, 0, 0, 0]
    return (kernel[0] - 1) * dil[0] + 1, strides[0], pads[0], pads[2]
