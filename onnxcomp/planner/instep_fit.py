"""Fit the cost model's per-codec in-step factors (``CostModel.codec_instep``) against measured step times.

A codec PyOp's calibrated time (timed alone, `runtime/calibrate.py`) is not its time inside a training step.
Profiles of steps show the gap per codec (intervalmask 1.7-2.3x, sz 1.6x, dpr_fp8 decode 0.8x,
`docs/notes/costcall.md`) but ORT's profiler itself slows codec-heavy steps by 8-11 %, so factors read off
profiles over-correct measured steps. Here the factors are fitted to what the acceptance figure compares:
the *measured* step (``onnxcomp measure``'s median) of benchmark rounds (``tools/bench_cost_model.py``), each
graph predicted from its round's baseline profile with the codec terms scaled:

    predicted(s) = base - sum_k T_k + sum_k s_k * T_k,   T_k = predicted seconds of codec key k in the graph

and s minimises sum over graphs of w * (predicted(s) / measured - 1)^2 (relative error: the figure is a
relative band), each round weighted equally, s bounded to [lo, hi].

What a measured step can and cannot identify:
- An encoder and its decoder always come in pairs in a graph, so a step time only sees their sum: one factor
  per codec, applied to both directions (stored per direction for the file format).
- A codec whose time is a small share of every step it appears in (bitmask, maxpool_index: ~1-2 % of a
  ResNet-18 step) cannot be told apart from the rest of the prediction's error; fitted anyway its factor runs to
  a bound. A key is fitted only where its codec time reaches ``min_share`` of the measured step in at least
  ``min_samples`` graphs; others stay 1.0.
- ``split_arena`` fits separate factors for steps run under ORT's arena (ORT's defaults) and without it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

DIRECTIONS = ("encode", "decode")


@dataclass(frozen=True)
class InstepSample:
    """One measured graph of one benchmark round.

    measured: the measured step (s); base: the step predicted with no in-step factors (s); codec: predicted
    seconds per (codec, direction) in that prediction; arena: run under ORT's arena; group: the round (the
    unit of weighting and of leave-one-out); label: for reports only."""

    measured: float
    base: float
    codec: dict[tuple[str, str], float]
    arena: bool = False
    group: str = ""
    label: str = ""


@dataclass
class InstepFit:
    """Fitted factors and what they were fitted on (the ``codec_instep`` entry of a cost model file)."""

    scale: dict[str, dict[str, float]] = field(default_factory=dict)
    scale_arena: dict[str, dict[str, float]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "scale_arena": self.scale_arena, **self.info}

    def factor(self, codec: str, direction: str, arena: bool) -> float:
        table = (self.scale_arena.get(codec) if arena else None) or self.scale.get(codec) or {}
        return float(table.get(direction, 1.0))

    def predict(self, sample: InstepSample) -> float:
        """The sample's step predicted with these factors."""
        return sample.base + sum((self.factor(c, d, sample.arena) - 1.0) * t for (c, d), t in sample.codec.items())


def _key(codec: str, arena: bool, split_arena: bool) -> tuple[str, bool]:
    return codec, bool(arena and split_arena)


def fit_codec_instep(samples: Sequence[InstepSample], *, bounds: tuple[float, float] = (0.5, 3.0),
                     min_share: float = 0.05, min_samples: int = 4, split_arena: bool = True,
                     weight_groups: bool = True) -> InstepFit:
    """Bounded least squares of the relative step error over the in-step factors (module docstring).

    bounds: no factor outside them (a factor of 0.2 or 5 would not be a codec's speed but the rest of the
    prediction's error landing on it). Raises ValueError on no usable samples or bad bounds."""
    from scipy.optimize import lsq_linear

    lo, hi = bounds
    if not 0 < lo <= 1 <= hi:
        raise ValueError(f"bounds must satisfy 0 < lo <= 1 <= hi, got {bounds}")
    usable = [s for s in samples if s.measured > 0 and math.isfinite(s.base)]
    if not usable:
        raise ValueError("no measured samples to fit")
    # identifiable keys: the codec's time is a visible share of the measured step in enough graphs
    seen: dict[tuple[str, bool], int] = {}
    for s in usable:
        per: dict[tuple[str, bool], float] = {}
        for (codec, _d), t in s.codec.items():
            k = _key(codec, s.arena, split_arena)
            per[k] = per.get(k, 0.0) + t
        for k, t in per.items():
            if t >= min_share * s.measured:
                seen[k] = seen.get(k, 0) + 1
    keys = sorted(k for k, n in seen.items() if n >= min_samples)
    info: dict[str, Any] = {"samples": len(usable), "groups": len({s.group for s in usable}),
                            "bounds": [lo, hi], "min_share": min_share, "min_samples": min_samples,
                            "split_arena": split_arena, "directions": "tied (encoder and decoder come in pairs)"}
    if not keys:
        return InstepFit(info={**info, "fitted": []})
    index = {k: i for i, k in enumerate(keys)}
    a = np.zeros((len(usable), len(keys)))
    err = np.zeros(len(usable))
    per_group: dict[str, int] = {}
    for s in usable:
        per_group[s.group] = per_group.get(s.group, 0) + 1
    w = np.array([1.0 / per_group[s.group] if weight_groups else 1.0 for s in usable])
    for i, s in enumerate(usable):
        err[i] = s.base / s.measured - 1.0
        for (codec, _d), t in s.codec.items():
            j = index.get(_key(codec, s.arena, split_arena))
            if j is not None:
                a[i, j] += t / s.measured
    sw = np.sqrt(w / w.sum())
    # residual = err + a @ (s - 1): solve for u = s - 1 within the bounds
    u = lsq_linear(a * sw[:, None], -err * sw, bounds=(lo - 1.0, hi - 1.0)).x
    fit = InstepFit(info={**info, "fitted": [f"{c}{'@arena' if ar else ''}" for c, ar in keys],
                          "at_bound": [f"{c}{'@arena' if ar else ''}" for (c, ar), x in zip(keys, u)
                                       if min(abs(1 + x - lo), abs(1 + x - hi)) < 1e-6]})
    for (codec, arena), x in zip(keys, u):
        table = fit.scale_arena if arena else fit.scale
        table[codec] = {d: round(float(1.0 + x), 4) for d in DIRECTIONS}
    return fit


def error_stats(errors: Iterable[float], band: float = 0.10) -> dict[str, float]:
    """Within-band count, mean and worst |error| of relative errors."""
    a = [abs(e) for e in errors]
    return {"n": len(a), "within": sum(x <= band for x in a), "mean": float(np.mean(a)) if a else 0.0,
            "worst": max(a) if a else 0.0}


def leave_one_group_out(samples: Sequence[InstepSample], **fit_kw: Any) -> dict[str, dict[str, dict[str, float]]]:
    """Per group: the errors before (no factors) and after (factors fitted on every other group)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for g in sorted({s.group for s in samples}):
        test = [s for s in samples if s.group == g]
        fit = fit_codec_instep([s for s in samples if s.group != g], **fit_kw)
        out[g] = {"before": error_stats(s.base / s.measured - 1 for s in test),
                  "after": error_stats(fit.predict(s) / s.measured - 1 for s in test)}
    return out
