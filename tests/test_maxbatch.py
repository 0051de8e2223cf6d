"""`onnxcomp maxbatch`: the search (doubling, then bisection, each batch measured once) on modelled peaks,
size parsing, and one measured end-to-end run (slow)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from onnxcomp.errors import OnnxcompError
from onnxcomp.planner.growth_budget import VERIFIED_GROWTH_MARGIN
from onnxcomp.runtime.maxbatch import parse_size, search_max_batch


def _fake_artifacts(name, batch, image, classes, out, **kw):  # noqa: ANN001, ANN003, ANN202
    """Stands in for ``artifacts.generate_artifacts``: a directory with a placeholder training graph."""
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "training_model.onnx").write_text("graph")


def _linear(fixed: int, per_sample: int, calls: list[int]):  # noqa: ANN202
    def probe(batch: int) -> tuple[int, dict]:
        calls.append(batch)
        return fixed + per_sample * batch, {}
    return probe


@pytest.mark.parametrize("fixed,per,budget,limit,expected,hit", [
    (100, 10, 1000, 4096, 90, False), (100, 10, 1100, 4096, 100, False), (0, 1, 10**9, 64, 64, True),
    (100, 10, 105, 4096, 0, False), (100, 10, 110, 4096, 1, False), (5, 3, 3 * 777 + 5, 4096, 777, False),
])
def test_search_finds_the_largest_fitting_batch(fixed: int, per: int, budget: int, limit: int, expected: int,
                                                hit: bool) -> None:
    calls: list[int] = []
    res = search_max_batch(_linear(fixed, per, calls), budget, limit=limit)
    assert res.max_batch == expected and res.hit_limit == hit
    assert len(calls) == len(set(calls))  # every batch measured once
    assert len(calls) <= 2 * max(expected, 1).bit_length() + 2
    assert all(p.fits == (p.bytes <= budget) for p in res.probes)


def test_search_rejects_bad_range() -> None:
    with pytest.raises(OnnxcompError):
        search_max_batch(lambda b: (0, {}), 10, start=5, limit=4)


@pytest.mark.parametrize("text,value", [("512MiB", 512 << 20), ("2GiB", 2 << 30), ("1.5 MB", 1_500_000),
                                        ("4096", 4096)])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "12 parsecs", "-5MiB", "0"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(OnnxcompError, match="memory size"):
        parse_size(text)


@pytest.mark.slow
def test_maxbatch_cli_measures_baseline_and_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnxcomp.cli import main

    rc = main(["maxbatch", "--model", "wide_resnet_s", "--image", "16", "--budget", "8MiB", "--policy", "zfp-8",
               "--max-batch", "32", "--work", str(tmp_path), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0
    base, zfp = res["results"]["baseline"], res["results"]["zfp-8"]
    for r in (base, zfp):
        fitting = [p["batch"] for p in r["probes"] if p["fits"]]
        assert r["max_batch"] == max(fitting)
        assert all(p["bytes"] > res["budget_bytes"] for p in r["probes"] if p["batch"] > r["max_batch"])
    assert zfp["max_batch"] >= base["max_batch"]


@pytest.mark.slow
def test_maxbatch_auto_plans_for_the_budget_at_every_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--policy auto: the budget planner at each probed batch; every fitting probe's measured peak is within
    the budget, and a batch it cannot plan counts as over."""
    from onnxcomp.cli import main

    rc = main(["maxbatch", "--model", "wide_resnet_s", "--image", "16", "--budget", "8MiB", "--policy", "auto",
               "--max-batch", "64", "--steps", "1", "--work", str(tmp_path), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0
    base, auto = res["results"]["baseline"], res["results"]["auto"]
    assert auto["max_batch"] >= base["max_batch"]
    for p in auto["probes"]:
        assert p["fits"] == (p["bytes"] <= res["budget_bytes"])
    # plans are kept per budget beside each probed batch's artifacts (``auto-<budget>B``)
    assert list(tmp_path.glob(f"*/auto-{res['budget_bytes']}B/training_model.onnx"))


@pytest.mark.parametrize("tolerance", [0.02, 0.1])
def test_search_tolerance_stops_bisecting_within_the_gap(tolerance: float) -> None:
    calls: list[int] = []
    exact = search_max_batch(_linear(100, 10, []), 23_000, start=256, limit=4096, interpolate=False)
    res = search_max_batch(_linear(100, 10, calls), 23_000, start=256, limit=4096, tolerance=tolerance,
                           interpolate=False)
    assert res.max_batch <= exact.max_batch < res.first_over
    assert res.first_over - res.max_batch <= max(1, int(tolerance * res.max_batch))
    assert len(calls) < len(exact.probes)


def test_search_rejects_bad_tolerance() -> None:
    with pytest.raises(OnnxcompError, match="tolerance"):
        search_max_batch(lambda b: (0, {}), 10, tolerance=1.5)


def _fake_pipeline(monkeypatch: pytest.MonkeyPatch, planned: list[tuple[int, bool]], per_sample: int,
                   plannable_up_to: int) -> None:
    """generate_artifacts / transform / measure replaced by models: peak = per_sample * batch; the planner
    predicts 90 % of it and fails above ``plannable_up_to``."""
    import onnxcomp.models.artifacts as artifacts_mod
    import onnxcomp.runtime.measure as measure_mod
    import onnxcomp.transform as transform_mod
    from onnxcomp.planner.auto import BudgetError

    def batch_of(path: Path) -> int:
        return int(next(part for part in str(path).split("_") if part.startswith("b"))[1:])

    def fake_transform(src, out, policy, *, budget_bytes, exact, force):  # noqa: ANN001, ANN202
        batch = batch_of(Path(src))
        planned.append((batch, exact))
        if batch > plannable_up_to:
            raise BudgetError(f"batch {batch}: no plan, dominated by x", predicted_peak=int(0.9 * per_sample * batch),
                              target=int(0.95 * budget_bytes))
        Path(out).mkdir(parents=True)
        (Path(out) / "training_model.onnx").write_text("graph")
        (Path(out) / "training_model.plan.json").write_text(json.dumps({"auto": {
            "predicted_peak_bytes": int(0.9 * per_sample * batch), "target_bytes": budget_bytes,
            "predicted_step_seconds": {"baseline": 1.0, "plan": 1.5}}}))

    class Measured:
        def __init__(self, batch: int, factor: int) -> None:
            self.peak_bytes = self.growth_bytes = factor * per_sample * batch
            self.step_time_s = 0.1

    def fake_measure(run_dir, model=None, steps=1, settings=None):  # noqa: ANN001, ANN202
        return Measured(batch_of(Path(run_dir)), 4 if Path(run_dir).name.startswith("resnet18_b") else 1)

    monkeypatch.setattr(artifacts_mod, "generate_artifacts", _fake_artifacts)
    monkeypatch.setattr(transform_mod, "transform", fake_transform)
    monkeypatch.setattr(measure_mod, "measure", fake_measure)


def test_maxbatch_cli_exact_plans_exact_and_caches_failed_budgets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--exact reaches the planner as exact=True under the policy name auto-exact; a batch it cannot plan
    counts as over and is not planned again in a second run with the same --work; the probes carry the plan's
    predicted peak and step time."""
    from onnxcomp.cli import main

    planned: list[tuple[int, bool]] = []
    _fake_pipeline(monkeypatch, planned, per_sample=1000, plannable_up_to=48)
    argv = ["maxbatch", "--model", "resnet18", "--budget", "100000", "--policy", "auto", "--exact",
            "--start", "4", "--max-batch", "256", "--work", str(tmp_path), "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    auto = res["results"]["auto-exact"]
    assert set(res["results"]) == {"baseline", "auto-exact"}
    assert auto["max_batch"] == 48 and res["results"]["baseline"]["max_batch"] == 25
    assert planned and all(exact for _, exact in planned)
    assert min(p["batch"] for p in auto["probes"]) == 4
    for p in auto["probes"]:
        assert p["fits"] == (p["batch"] <= 48)
        if p["extras"]["planned"]:
            assert p["extras"]["predicted_peak_bytes"] == int(0.9 * 1000 * p["batch"])
            assert p["extras"]["predicted_step_s"] == 1.5
        else:
            assert "dominated by" in p["extras"]["error"]
            # the failure's best reachable predicted peak, as a figure the search can interpolate with
            assert p["extras"]["predicted_peak_bytes"] == int(0.9 * 1000 * p["batch"])
            assert p["extras"]["reachable_bytes"] > p["extras"]["predicted_peak_bytes"]
    first = list(planned)
    assert main(argv) == 0   # every plan and every failure reused: nothing planned again
    capsys.readouterr()
    assert planned == first


def test_maxbatch_cli_exact_needs_auto(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnxcomp.cli import main

    assert main(["maxbatch", "--model", "resnet18", "--budget", "1MiB", "--policy", "zfp-8", "--exact",
                 "--work", str(tmp_path)]) != 0
    assert "--exact" in capsys.readouterr().err


def test_maxbatch_cli_reuses_an_earlier_baseline_and_starts_per_policy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--reuse takes the baseline's search from an earlier result (nothing probed again) when it was
    measured the same way, and refuses one measured with another budget; --start-at starts one policy."""
    import onnxcomp.runtime.measure as measure_mod
    from onnxcomp.cli import main

    planned: list[tuple[int, bool]] = []
    _fake_pipeline(monkeypatch, planned, per_sample=1000, plannable_up_to=1000)
    measured: list[str] = []
    real = measure_mod.measure
    monkeypatch.setattr(measure_mod, "measure", lambda run_dir, **kw: measured.append(Path(run_dir).name)
                        or real(run_dir, **kw))
    common = ["maxbatch", "--model", "resnet18", "--budget", "100000", "--work", str(tmp_path), "--json"]
    assert main(common) == 0
    first = tmp_path / "baseline.json"
    first.write_text(capsys.readouterr().out)
    measured.clear()
    assert main([*common, "--policy", "auto", "--start-at", "auto=64", "--reuse", str(first)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["results"]["baseline"] == json.loads(first.read_text())["results"]["baseline"]
    assert measured and all(name.startswith("auto-") for name in measured)
    assert min(p["batch"] for p in res["results"]["auto"]["probes"]) == 64
    assert res["results"]["auto"]["max_batch"] == 100
    assert res["results"]["auto"]["vs_baseline"] == 100 / 25
    other = ["maxbatch", "--model", "resnet18", "--budget", "200000", "--work", str(tmp_path), "--json"]
    assert main([*other, "--reuse", str(first)]) != 0
    assert "budget_bytes" in capsys.readouterr().err


@pytest.mark.parametrize("figure", [
    lambda b: 46_000_000 + 1_600_000 * b,                   # fixed + per sample (ResNet-18's baseline)
    lambda b: 1000 * b + 3 * b * b,                         # grows faster than linear
    lambda b: 10_000 * (b // 100) + 5 * b,                  # steps
])
@pytest.mark.parametrize("budget", [512 << 20, 3_000_000, 123_457])
def test_interpolated_search_finds_what_bisection_finds(figure, budget: int) -> None:  # noqa: ANN001
    bisect_calls: list[int] = []
    calls: list[int] = []

    def probe(seen: list[int]):  # noqa: ANN202
        return lambda b: (seen.append(b) or figure(b), {})

    plain = search_max_batch(probe(bisect_calls), budget, start=8, limit=8192, interpolate=False)
    fast = search_max_batch(probe(calls), budget, start=8, limit=8192)
    assert fast.max_batch == plain.max_batch and fast.hit_limit == plain.hit_limit
    assert len(calls) == len(set(calls)) and len(calls) <= len(bisect_calls) + 2


def test_interpolated_search_needs_few_probes_on_a_linear_peak() -> None:
    calls: list[int] = []
    res = search_max_batch(_linear(46_000_000, 1_600_000, calls), 512 << 20, start=256, limit=4096)
    assert res.max_batch == (512 * 2**20 - 46_000_000) // 1_600_000
    assert len(calls) <= 5   # 256, 512, then the line's answer and its neighbour (bisection: 10)


def _arena_pipeline(monkeypatch: pytest.MonkeyPatch, per_sample: int, overhead: float, seen: list,
                    growth_miss: int = 0, modes: list | None = None, margins: list | None = None) -> None:
    """A model of ResNet-18 under ORT's defaults: the arena keeps the previous step's memory, so a step's peak
    over its pre-step RSS reads 0 while the growth over set-up is ``per_sample`` x batch (baseline); the
    planner meets any planning budget down to 30 % of the baseline's figure, predicting 95 % of it, and a
    plan's measured growth is ``overhead`` x its prediction (pattern block, arena regions, node bookkeeping
    the planner does not model). ``seen``: (batch, planning budget) of every plan made.

    A plan made with budget_for="ort-defaults" (the growth planner) predicts the growth itself: it is planned to
    its budget less its margin (95 % where transform gets none) and measures that prediction plus ``growth_miss``
    bytes (an additive miss, what the growth model leaves out); its floor is the same. ``modes``: the budget_for of
    every plan made; ``margins``: (margin given to transform, plan directory name) of every plan made."""
    import onnxcomp.models.artifacts as artifacts_mod
    import onnxcomp.runtime.measure as measure_mod
    import onnxcomp.transform as transform_mod
    from onnxcomp.planner.auto import BudgetError

    def batch_of(path: Path) -> int:   # the artifact directory's name: resnet18_b<batch>_64px
        name = next(q.name for q in (path, *path.parents) if q.name.startswith("resnet18_b"))
        return int(name.split("_")[1][1:])

    def fake_transform(src, out, policy, *, budget_bytes, exact, force, budget_for="step-peak",  # noqa: ANN001, ANN202
                       margin=None):
        batch = batch_of(Path(src))
        seen.append((batch, budget_bytes))
        if modes is not None:
            modes.append(budget_for)
        if margins is not None:
            margins.append((margin, Path(out).name))
        aim = 1 - (0.05 if margin is None else margin)       # planned to the budget less the margin
        floor = 0.3 * per_sample * batch
        if floor > aim * budget_bytes:
            raise BudgetError("no plan", predicted_peak=int(floor), target=int(aim * budget_bytes))
        Path(out).mkdir(parents=True)
        (Path(out) / "training_model.onnx").write_text("graph")
        auto = {"predicted_peak_bytes": int(aim * budget_bytes), "target_bytes": int(aim * budget_bytes),
                "predicted_step_seconds": {"baseline": 1.0, "plan": 1.5}}
        if budget_for == "ort-defaults":
            auto["ort_defaults"] = {"predicted_growth_bytes": int(aim * budget_bytes), "step_budget_bytes": 1}
        (Path(out) / "training_model.plan.json").write_text(json.dumps({"auto": auto}))

    class Measured:
        def __init__(self, growth: int) -> None:
            self.peak_bytes, self.growth_bytes, self.step_time_s = 0, growth, 0.1
            self.extras = {"growth_bytes_per_step": [growth, growth]}

    def fake_measure(run_dir, model=None, steps=1, settings=None):  # noqa: ANN001, ANN202
        assert settings.arena
        plan = Path(run_dir) / "training_model.plan.json"
        if plan.exists():
            auto = json.loads(plan.read_text())["auto"]
            if "ort_defaults" in auto:
                return Measured(auto["ort_defaults"]["predicted_growth_bytes"] + growth_miss)
            return Measured(int(overhead * auto["predicted_peak_bytes"]))
        return Measured(per_sample * batch_of(Path(run_dir)))

    monkeypatch.setattr(artifacts_mod, "generate_artifacts", _fake_artifacts)
    monkeypatch.setattr(transform_mod, "transform", fake_transform)
    monkeypatch.setattr(measure_mod, "measure", fake_measure)


ORT_DEFAULTS = ["--arena", "--mem-pattern", "--mem-reuse", "--order", "default"]


def test_maxbatch_under_ort_defaults_compares_growth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """With the arena on a step's peak reads ~0: the search compares the growth over set-up (the old default,
    the step peak, found every batch fitting), refuses --figure peak, and refuses a probe of fewer runs than
    ORT's memory pattern needs to show its block."""
    from onnxcomp.cli import main

    _arena_pipeline(monkeypatch, per_sample=1000, overhead=1.5, seen=[])
    common = ["maxbatch", "--model", "resnet18", "--budget", "100000", "--max-batch", "512", "--work",
              str(tmp_path), "--json", *ORT_DEFAULTS]
    assert main(common) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["figure"] == "growth"
    assert res["results"]["baseline"]["max_batch"] == 100
    assert main([*common, "--figure", "peak"]) != 0
    assert "growth" in capsys.readouterr().err
    assert main([*common, "--steps", "1"]) != 0
    assert "pattern" in capsys.readouterr().err


def test_maxbatch_auto_replans_below_the_budget_under_ort_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan for the budget itself measures over it under ORT's defaults (growth 1.5x the prediction): the
    probe is planned again for a proportionally lower planning budget, and later probes start from what the
    earlier ones measured (one plan each). Planning for the budget only, every batch the planner can reach
    would count as over."""
    from onnxcomp.cli import main

    seen: list[tuple[int, int]] = []
    _arena_pipeline(monkeypatch, per_sample=1000, overhead=1.5, seen=seen)
    budget = 1_000_000
    assert main(["maxbatch", "--model", "resnet18", "--budget", str(budget), "--policy", "auto", "--start", "500",
                 "--max-batch", "8192", "--work", str(tmp_path), "--json", "--budget-for", "step-peak",
                 *ORT_DEFAULTS]) == 0
    res = json.loads(capsys.readouterr().out)
    base, auto = res["results"]["baseline"], res["results"]["auto"]
    assert base["max_batch"] == 1000
    assert res["budget_for"] == "step-peak"
    # reachable: 0.3 * 1000 * b <= 0.95 * planning budget, and 1.5 * 0.95 * planning budget <= budget
    assert 2000 <= auto["max_batch"] <= int(budget / 1.5 / 1000 / 0.3) + 1
    assert seen[0] == (500, budget)               # the first plan is for the budget itself ...
    first = auto["probes"][0]["extras"]["attempts"]
    assert len(first) == 2 and first[0]["bytes"] > budget >= first[1]["bytes"]   # ... and is planned again
    assert first[1]["planned_budget_bytes"] < budget
    for p in auto["probes"]:
        assert p["fits"] == (p["bytes"] <= budget)
        if p["fits"]:
            assert p["extras"]["growth_bytes"] == p["bytes"]
    # after the first probe every plan starts from the learned fraction: one plan per probe
    assert all(len(p["extras"]["attempts"]) == 1 for p in auto["probes"][1:])


def test_maxbatch_auto_plans_for_growth_under_ort_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Under exactly ORT's defaults an auto probe is planned by the growth planner (`transform --budget-for
    ort-defaults`) for the budget itself; a plan that measures over it (the growth model misses 8 % of the budget,
    additively) is planned again for the budget lowered by the miss + 1 % (`transform --verify`'s rule), and later
    probes start from that lowered budget: one plan each. The largest batch is what the growth planner reaches,
    not what a proportional planning fraction would."""
    from onnxcomp.cli import main

    seen: list[tuple[int, int]] = []
    modes: list[str] = []
    budget = 1_000_000
    miss = 80_000
    _arena_pipeline(monkeypatch, per_sample=1000, overhead=1.5, seen=seen, growth_miss=miss, modes=modes)
    assert main(["maxbatch", "--model", "resnet18", "--budget", str(budget), "--policy", "auto", "--start", "500",
                 "--max-batch", "8192", "--work", str(tmp_path), "--json", *ORT_DEFAULTS]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["budget_for"] == "ort-defaults"
    assert modes and set(modes) == {"ort-defaults"}
    auto = res["results"]["auto"]
    assert seen[0] == (500, budget)                 # planned for the budget itself: the prediction is the growth
    first = auto["probes"][0]["extras"]["attempts"]
    aim = 1 - VERIFIED_GROWTH_MARGIN      # a measurement follows each plan: planned 2 %, not 5 %, under its budget
    assert res["margin"] == VERIFIED_GROWTH_MARGIN
    assert len(first) == 2 and first[0]["bytes"] == int(aim * budget) + miss > budget
    lowered = budget - (first[0]["bytes"] - budget) - budget // 100
    assert abs(first[1]["planned_budget_bytes"] - lowered) <= 1 << 20   # whole MiB (here: below 1 MiB, exact)
    assert first[1]["bytes"] <= budget
    assert first[1]["predicted_growth_bytes"] == int(aim * first[1]["planned_budget_bytes"])
    # later probes start from the lowered budget (one plan each), so the floor there (0.3 x 1000 x b <= 0.98 x
    # planning budget) is the largest batch; the step-peak mode's proportional rule would have planned for
    # budget x 0.98 / 1.03 (about 3 % lower) and reached fewer
    assert all(p["extras"]["attempts"][0]["planned_budget_bytes"] == first[1]["planned_budget_bytes"]
               and len(p["extras"]["attempts"]) == 1 for p in auto["probes"][1:])
    reach = int(aim * first[1]["planned_budget_bytes"] / 300)
    assert auto["max_batch"] == reach
    assert reach > int(0.95 * budget * 0.98 / ((0.95 * budget + miss) / budget) / 300)
    for p in auto["probes"]:
        assert p["fits"] == (p["bytes"] <= budget)
    # a plan for the growth needs the growth measured under ORT's defaults
    assert main(["maxbatch", "--model", "resnet18", "--budget", str(budget), "--policy", "auto", "--start", "500",
                 "--work", str(tmp_path), "--json", "--budget-for", "ort-defaults", "--arena", "--mem-pattern"]) != 0
    assert "--order default" in capsys.readouterr().err


def test_maxbatch_growth_probes_take_the_margin_given_and_keep_its_plans_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A growth-mode probe is planned with VERIFIED_GROWTH_MARGIN unless --margin says otherwise (0.05: the
    planner's default, as before); plans of another margin go to their own directories, so a budget refused at one
    margin is not taken as refused at another. The smaller margin reaches a larger batch where nothing is missed."""
    from onnxcomp.cli import main

    budget = 1_000_000
    reached = {}
    for margin, tag in ((None, "-m0.02"), ("0.05", ""), ("0.1", "-m0.1")):
        margins: list = []
        _arena_pipeline(monkeypatch, per_sample=1000, overhead=1.0, seen=[], margins=margins)
        work = tmp_path / f"w{margin}"
        assert main(["maxbatch", "--model", "resnet18", "--budget", str(budget), "--policy", "auto", "--start", "500",
                     "--max-batch", "8192", "--work", str(work), "--json", *ORT_DEFAULTS,
                     *(["--margin", margin] if margin else [])]) == 0
        res = json.loads(capsys.readouterr().out)
        want = VERIFIED_GROWTH_MARGIN if margin is None else float(margin)
        assert res["margin"] == want and margins and all(m == want for m, _ in margins)
        assert all(name.startswith(f"auto-growth{tag}-") for _, name in margins)
        reached[want] = res["results"]["auto"]["max_batch"]
        # the floor (0.3 x 1000 x b) must be within the margin's aim (1 - margin) x budget: no miss here
        assert reached[want] == int((1 - want) * budget / 300)
    assert reached[0.02] > reached[0.05] > reached[0.1]
    assert main(["maxbatch", "--model", "resnet18", "--budget", str(budget), "--policy", "auto", "--work",
                 str(tmp_path / "bad"), "--json", *ORT_DEFAULTS, "--margin", "1.5"]) != 0
    assert "margin" in capsys.readouterr().err


def test_maxbatch_refuses_a_budget_mode_its_probes_do_not_measure(tmp_path: Path) -> None:
    # a probe measures growth or the step peak; "ort-defaults-total" (growth + set-up added) is transform's only
    from onnxcomp.runtime.maxbatch import max_batch
    from onnxcomp.runtime.session import RuntimeSettings

    settings = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")
    with pytest.raises(OnnxcompError, match="use step-peak or ort-defaults"):
        max_batch("resnet18", 32, 1 << 30, ["auto"], settings=settings, figure="growth", steps=3,
                  work_dir=tmp_path, budget_for="ort-defaults-total")
