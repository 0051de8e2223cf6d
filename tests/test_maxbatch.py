"""`onnxcomp maxbatch`: the search (doubling, then bisection, each batch measured once) on modelled peaks,
size parsing, and one measured end-to-end run (slow)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.maxbatch import parse_size, search_max_batch


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
    assert any((tmp_path / d / "auto" / "training_model.onnx").exists() for d in [q.name for q in tmp_path.iterdir()])
