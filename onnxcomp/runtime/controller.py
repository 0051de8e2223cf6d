"""COMET's adaptive error-bound controller (COMET §3.1–3.3), run between training steps.

Every ``window`` steps it collects, per error-bounded layer, the activation's nonzero ratio R, the scale
L of dY (the gradient of the loss at the layer's output) and the weight-gradient scale M (mean |∂L/∂W|,
smoothed over collections — the "hidden momentum" COMET derives from gradients when the optimizer's
momentum is not exposed), and sets

    σ  = sigma_frac · M                      (COMET eq. 1, sigma_frac = 1 %)
    eb = σ / (a · L · √(N · R))              (COMET eq. 3)

Two departures from the paper's symbols, both measured by tools/error_injection.py (README): N is the
number of dY·X products summed into one weight-gradient value (batch × output positions for a conv, batch
for a fully-connected layer, batch × sequence positions for a transformer's MatMul: the pass records it) rather than the batch, and L is rms(dY) rather than mean |dY|. With them the
variance of a sum of uniform errors gives a = 1/√3 (the fitted per-layer a lies at or below it, so the
bound errs on the safe side); with the paper's literal N and L̄ the fitted a spread over two decades. The window halves when any bound moved by more than 2× and returns
to its initial value once bounds settle. Bounds reach the encoders through onnxcomp.runtime.bounds, so the
session is never rebuilt. ``static=True`` keeps the graph's bounds (the ablation baseline).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxcomp.custom_ops import contract
from onnxcomp.runtime import bounds

# The error-bounded codec whose encoders carry a per-layer key and bound.
BOUNDED_CODEC = "sz"
# Var(Σ dY·e) with e ~ U[-eb, eb] on a fraction R of N terms = eb²/3 · R · N · rms(dY)²  →  a = 1/√3.
DEFAULT_A = 1 / math.sqrt(3)


@dataclass
class BoundedLayer:
    key: str
    weight: str
    batch: int
    eb0: float
    adaptive: bool
    history: list[tuple[int, float]] = field(default_factory=list)   # (step, eb set)
    grad_scale: float | None = None
    summed: int | None = None   # dY·X products per dW value, when the pass knew it (MatMul/Gemm layers)


def bounded_layers(model: onnx.ModelProto | str | Path) -> list[BoundedLayer]:
    """The error-bounded encoders of a rewritten training graph, from their ``params`` attributes."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    layers = []
    for node in model.graph.node:
        if not contract.is_encoder(node.domain, node.op_type, BOUNDED_CODEC):
            continue
        attr = next((a for a in node.attribute if a.name == contract.PARAMS_ATTR), None)
        params = contract.parse_params(attr.s if attr is not None else None)
        if "key" not in params:
            continue
        layers.append(BoundedLayer(params["key"], params.get("weight", ""), int(params.get("batch", 1)),
                                   float(params[contract.ERROR_BOUND_PARAM]), bool(params.get("adaptive", True)),
                                   summed=int(params["summed"]) if "summed" in params else None))
    return layers


class AdaptiveBoundController:
    """Drive ``onnxcomp.runtime.bounds`` from training statistics; call around every train step."""

    def __init__(self, layers: list[BoundedLayer], *, a: float = DEFAULT_A, sigma_frac: float = 0.01,
                 window: int = 50, static: bool = False, momentum: float = 0.9,
                 eb_limits: tuple[float, float] = (1e-8, 1.0)) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 (got {window})")
        self.layers = layers
        self.a = a
        self.sigma_frac = sigma_frac
        self.window0 = window
        self.window = window
        self.static = static
        self.momentum = momentum
        self.eb_limits = eb_limits
        self.next_collect = 1
        self.log: list[dict[str, Any]] = []
        bounds.reset()
        for layer in layers:
            bounds.set_bound(layer.key, layer.eb0)

    @classmethod
    def for_model(cls, model: onnx.ModelProto | str | Path, **kw: Any) -> "AdaptiveBoundController | None":
        layers = bounded_layers(model)
        if not layers:
            return None
        kw.setdefault("static", not any(layer.adaptive for layer in layers))
        return cls(layers, **kw)

    def before_step(self, step: int) -> None:
        bounds.set_collecting(not self.static and step >= self.next_collect)

    def after_step(self, step: int, parameters: Any) -> None:
        """``parameters``: the CheckpointState's parameters (name → Parameter with ``.grad``), read before
        the optimizer step resets gradients."""
        if not bounds.collecting():
            return
        bounds.set_collecting(False)
        seen = bounds.stats()
        bounds.clear_stats()
        moved = 1.0
        for layer in self.layers:
            s = seen.get(layer.key)
            if s is None or s.nonzero_ratio is None or s.dy_rms is None:
                continue
            grad = _grad(parameters, layer.weight)
            if grad is None:
                continue
            g = float(np.mean(np.abs(grad)))
            layer.grad_scale = g if layer.grad_scale is None else \
                self.momentum * layer.grad_scale + (1 - self.momentum) * g
            eb = self.bound_for(layer, s.nonzero_ratio, s.dy_rms, s.dy_numel, grad.shape)
            if eb is None:
                continue
            old = bounds.bound(layer.key, layer.eb0)
            moved = max(moved, eb / old, old / eb)
            bounds.set_bound(layer.key, eb)
            layer.history.append((step, eb))
            self.log.append({"step": step, "layer": layer.key, "eb": eb, "R": s.nonzero_ratio,
                             "L": s.dy_rms, "M": layer.grad_scale, "window": self.window})
        # Bounds still moving fast: look again sooner; settled: back to the configured activeness.
        self.window = max(1, self.window // 2) if moved > 2.0 else self.window0
        self.next_collect = step + self.window

    def bound_for(self, layer: BoundedLayer, nonzero_ratio: float, dy_rms: float,
                  dy_numel: int | None, weight_shape: tuple[int, ...]) -> float | None:
        if layer.grad_scale is None or dy_rms <= 0 or nonzero_ratio <= 0:
            return None
        sigma = self.sigma_frac * layer.grad_scale
        n = layer.summed if layer.summed is not None else combined_elements(layer.batch, dy_numel, weight_shape)
        eb = sigma / (self.a * dy_rms * math.sqrt(n * nonzero_ratio))
        lo, hi = self.eb_limits
        return float(min(max(eb, lo), hi))

    def summary(self) -> dict[str, Any]:
        return {"a": self.a, "sigma_frac": self.sigma_frac, "window": self.window0, "static": self.static,
                "bounds": {layer.key: bounds.bound(layer.key, layer.eb0) for layer in self.layers},
                "updates": len(self.log), "payload": bounds.payload_summary()}


def combined_elements(batch: int, dy_numel: int | None, weight_shape: tuple[int, ...]) -> float:
    """How many dY·X products are summed into one weight-gradient value.

    Conv (weight C_out×C_in×kh×kw, dY N×C_out×H×W): batch × output positions = dY elements / C_out.
    Fully connected: the batch.
    """
    if len(weight_shape) >= 3 and dy_numel:
        return max(1.0, dy_numel / weight_shape[0])
    return float(max(1, batch))


def _grad(parameters: Any, name: str) -> np.ndarray | None:
    try:
        p = parameters[name]
    except (KeyError, IndexError, TypeError):
        return None
    g = p.grad
    return None if g is None else np.asarray(g)
