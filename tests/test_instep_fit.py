"""Per-codec in-step factors: the least-squares fit against measured steps and how the cost model applies them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from onnxcomp.planner import cost_model as cm
from onnxcomp.planner.cost_model import CostModel, LinearFit
from onnxcomp.planner.instep_fit import InstepSample, fit_codec_instep, leave_one_group_out


def _rounds(true: dict[str, float], *, share: dict[str, float], noise: float = 0.01, seed: int = 0,
            rounds: int = 4, graphs: int = 6, arena_true: dict[str, float] | None = None) -> list[InstepSample]:
    """Synthetic rounds: each graph's step = other ORT work + per codec (share x other) x its true factor; the
    base prediction has every codec at factor 1 and the other work right up to ``noise``."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rounds):
        for g in range(graphs):
            arena = bool(g % 2) if arena_true is not None else False
            factors = arena_true if arena and arena_true is not None else true
            other = rng.uniform(0.4, 1.5)
            codec = {}
            for name, sh in share.items():
                t = sh * other * rng.uniform(0.5, 1.5)
                codec[(name, "encode")], codec[(name, "decode")] = 0.4 * t, 0.6 * t
            measured = other * (1 + rng.normal(0, noise)) + sum(factors[c] * t for (c, _d), t in codec.items())
            out.append(InstepSample(measured, other + sum(codec.values()), codec, arena, f"r{r}", f"g{g}"))
    return out


def test_fit_recovers_known_factors_per_codec() -> None:
    samples = _rounds({"sz": 1.6, "dpr_fp8": 0.7}, share={"sz": 0.3, "dpr_fp8": 0.25})
    fit = fit_codec_instep(samples, split_arena=False)
    assert fit.scale["sz"]["encode"] == pytest.approx(1.6, abs=0.08)
    assert fit.scale["dpr_fp8"]["decode"] == pytest.approx(0.7, abs=0.08)
    # one factor per codec: a step time cannot tell the encoder from the decoder
    assert fit.scale["sz"]["encode"] == fit.scale["sz"]["decode"]
    before = np.mean([abs(s.base / s.measured - 1) for s in samples])
    after = np.mean([abs(fit.predict(s) / s.measured - 1) for s in samples])
    assert after < 0.3 * before


def test_arena_factors_are_fitted_apart() -> None:
    samples = _rounds({"sz": 1.5}, share={"sz": 0.3}, arena_true={"sz": 0.8})
    fit = fit_codec_instep(samples, split_arena=True)
    assert fit.scale["sz"]["encode"] == pytest.approx(1.5, abs=0.08)
    assert fit.scale_arena["sz"]["encode"] == pytest.approx(0.8, abs=0.08)
    pooled = fit_codec_instep(samples, split_arena=False)
    assert not pooled.scale_arena and 0.8 < pooled.scale["sz"]["encode"] < 1.5


def test_small_shares_are_not_fitted_and_bounds_hold() -> None:
    # bitmask at 1 % of the step: invisible next to 1 % noise, left at 1.0 rather than fitted to a bound
    samples = _rounds({"sz": 5.0, "bitmask": 3.0}, share={"sz": 0.3, "bitmask": 0.01})
    fit = fit_codec_instep(samples, split_arena=False, bounds=(0.5, 3.0))
    assert "bitmask" not in fit.scale and fit.factor("bitmask", "decode", False) == 1.0
    assert fit.scale["sz"]["encode"] == pytest.approx(3.0) and fit.info["at_bound"] == ["sz"]
    with pytest.raises(ValueError):
        fit_codec_instep(samples, bounds=(1.2, 3.0))
    with pytest.raises(ValueError):
        fit_codec_instep([])


def test_leave_one_round_out_reports_held_out_errors() -> None:
    samples = _rounds({"sz": 1.6}, share={"sz": 0.3}, rounds=3)
    loo = leave_one_group_out(samples, split_arena=False)
    assert sorted(loo) == ["r0", "r1", "r2"]
    for r in loo.values():
        assert r["after"]["n"] == r["before"]["n"] == 6 and r["after"]["mean"] < r["before"]["mean"]


def _cost() -> CostModel:
    fits = {d: LinearFit((1e-3, 0.0, 0.0)) for d in cm.DIRECTIONS}
    return CostModel({"sz": fits, "bitmask": dict(fits)}, {"*": LinearFit((0.0, 1e-9, 0.0))})


def test_cost_model_applies_the_factors(monkeypatch: pytest.MonkeyPatch) -> None:
    cost = _cost()
    cost.codec_instep = {"scale": {"sz": {"encode": 1.5, "decode": 2.0}}, "scale_arena": {"sz": {"encode": 0.5}}}
    assert cost.codec_seconds("sz", "encode", 1 << 20) == pytest.approx(1.5e-3)
    assert cost.codec_seconds("sz", "decode", 1 << 20) == pytest.approx(2.0e-3)
    assert cost.codec_seconds("sz", "encode", 1 << 20, arena=True) == pytest.approx(0.5e-3)
    assert cost.codec_seconds("sz", "decode", 1 << 20, arena=True) == pytest.approx(2.0e-3)  # falls back
    assert cost.codec_seconds("sz", "encode", 1 << 20, in_step=False) == pytest.approx(1e-3)
    assert cost.codec_seconds("bitmask", "encode", 1 << 20) == pytest.approx(1e-3)  # not fitted: 1.0
    again = CostModel.from_dict(json.loads(json.dumps(cost.to_dict())))
    assert again.codec_instep == cost.codec_instep and "codec_instep" not in again.meta
    bad = cost.to_dict()
    bad["codec_instep"] = {"scale": {"sz": {"encode": -1.0}}}
    with pytest.raises(ValueError):
        CostModel.from_dict(bad)


def test_a_calibration_without_factors_inherits_the_shipped_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = {"scale": {"sz": {"encode": 1.25, "decode": 1.25}}}
    monkeypatch.setattr(cm, "_SHIPPED_INSTEP", shipped)
    data = _cost().to_dict()
    del data["codec_instep"]  # as calibrate writes it: no in-step factors of its own
    model = CostModel.from_dict(data)
    assert model.codec_seconds("sz", "encode", 1 << 20) == pytest.approx(1.25e-3)
    data["codec_instep"] = {}  # an explicit empty entry means none
    assert CostModel.from_dict(data).codec_seconds("sz", "encode", 1 << 20) == pytest.approx(1e-3)
