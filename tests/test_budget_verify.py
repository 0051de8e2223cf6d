"""planner/budget_verify.py (`transform --policy auto --budget B --verify`): the measured loop on stubs, the CLI's
checks, and one real run on the small artifacts (slow); plus ort_growth's codec-table term (codec_resident_bytes),
which the first measurements of that loop found missing (docs/notes/budgetguard.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from onnxcomp.cli import main
from onnxcomp.planner.auto import BudgetError
from onnxcomp.planner.budget_verify import EXTRA_SHARE, next_internal_budget, verify_budget
from onnxcomp.planner.ort_growth import GrowthModel, _predict, codec_resident_bytes, measure_codec_resident

KiB, MiB = 1 << 10, 1 << 20


def test_verify_replans_lower_until_the_measurement_fits():
    measured = iter([12 * MiB, 10 * MiB])
    asked: list[int] = []

    def write(b: int) -> int:
        asked.append(b)
        return b

    out = verify_budget(11 * MiB, write, lambda _r: next(measured))
    assert out.fits and len(out.attempts) == 2
    # the second plan is asked for the budget less the 1 MiB miss less EXTRA_SHARE of the budget
    assert asked == [11 * MiB, 10 * MiB - int(EXTRA_SHARE * 11 * MiB)]
    assert out.to_dict()["measured_bytes"] == 10 * MiB and out.result == asked[-1]


def test_verify_takes_the_first_plan_when_it_measures_within_the_budget():
    asked: list[int] = []
    out = verify_budget(11 * MiB, lambda b: asked.append(b), lambda _r: 11 * MiB)
    assert out.fits and asked == [11 * MiB]


def test_verify_fails_in_one_line_naming_the_lowest_measured_figure():
    measured = iter([13 * MiB, 12 * MiB, 12.5 * MiB, 12.2 * MiB])
    with pytest.raises(BudgetError, match=r"lowest measured is 12\.00 MiB") as e:
        verify_budget(11 * MiB, lambda b: b, lambda _r: int(next(measured)))
    assert "\n" not in str(e.value) and e.value.predicted_peak == 12 * MiB


def test_verify_stops_when_the_planner_cannot_meet_the_lowered_budget():
    def write(b: int) -> int:
        if b < 11 * MiB:
            raise BudgetError("growth budget cannot be met")
        return b

    with pytest.raises(BudgetError, match=r"cannot be met.*lowest measured is 12\.00 MiB"):
        verify_budget(11 * MiB, write, lambda _r: 12 * MiB)


def test_next_internal_budget_is_always_lower():
    assert next_internal_budget(10 * MiB, 10 * MiB, 10 * MiB) < 10 * MiB
    assert next_internal_budget(100, 100, 100) == 99


def test_verify_needs_the_budget_planner(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "o"
    assert main(["transform", str(tmp_path), "-o", str(out), "--policy", "lossless", "--verify"]) == 2
    assert "--verify" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("args, margin", [
    (["--budget-for", "ort-defaults", "--verify"], 0.02),         # a measurement follows: VERIFIED_GROWTH_MARGIN
    (["--budget-for", "ort-defaults-total", "--verify"], 0.02),
    (["--budget-for", "ort-defaults"], None),                      # plain transform: the planner's default (5 %)
    (["--verify"], None),                                          # the step peak under --verify: unchanged
    (["--budget-for", "ort-defaults", "--verify", "--margin", "0.1"], 0.1),   # the user's, with or without verify
    (["--budget-for", "ort-defaults", "--margin", "3%"], 0.03),
    (["--margin", "0"], 0.0),
])
def test_cli_margin_for_the_planner(tmp_path: Path, monkeypatch, capsys, args, margin) -> None:  # noqa: ANN001
    import onnxcomp.transform as transform_mod
    from onnxcomp.errors import OnnxcompError

    seen: list[dict] = []

    def fake_transform(*_a, **kw):  # noqa: ANN002, ANN003, ANN202
        seen.append(kw)
        raise OnnxcompError("stop here")

    monkeypatch.setattr(transform_mod, "transform", fake_transform)
    (tmp_path / "art").mkdir()
    main(["transform", str(tmp_path / "art"), "-o", str(tmp_path / "o"), "--policy", "auto", "--budget", "64MiB",
          *args])
    assert "stop here" in capsys.readouterr().err
    assert seen and seen[0].get("margin") == margin


def test_cli_margin_needs_the_budget_planner_and_a_share(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "o"
    assert main(["transform", str(tmp_path), "-o", str(out), "--policy", "lossless", "--margin", "0.02"]) != 0
    assert "--margin" in capsys.readouterr().err and not out.exists()
    for bad in ("1", "-0.1", "abc", "150%"):
        with pytest.raises(SystemExit):
            main(["transform", str(tmp_path), "-o", str(out), "--policy", "auto", "--budget", "64MiB", "--margin", bad])
        assert "share of the budget" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- codec tables (ort_growth)
def _pool_index_op(name: str, direction: str, n: int, c: int, hw: int, out_hw: int) -> tuple:
    params = json.dumps({"auto_pad": "NOTSET", "ceil_mode": 1, "dilations": [1, 1], "input_shape": [n, c, hw, hw],
                         "kernel_shape": [3, 3], "pads": [0, 0, 0, 0], "storage_order": 0, "strides": [2, 2],
                         "tensor": name})
    op = "OnnxcompEncode_maxpool_index" if direction == "encode" else "OnnxcompDecode_maxpool_index"
    io = ([name], [name + "_p"]) if direction == "encode" else ([name + "_p"], [name])
    node = helper.make_node(op, *io, domain="ai.onnx.contrib", params=params)
    return node, {name: (TensorProto.INT64, (n, c, out_hw, out_hw))}


def test_maxpool_index_tables_are_held_once_per_pool_geometry():
    a_enc, full = _pool_index_op("a", "encode", 16, 64, 23, 11)
    a_dec, _ = _pool_index_op("a", "decode", 16, 64, 23, 11)
    b_enc, full_b = _pool_index_op("b", "encode", 16, 256, 5, 2)
    full = {**full, **full_b}
    one = codec_resident_bytes([a_enc], full)
    # the NumPy path caches 64K int64 window origins per geometry (512 KiB) for the process
    assert 400 * KiB <= one <= 1 * MiB
    # encoder and decoder of the same pool share the tables; a second geometry adds its own
    assert codec_resident_bytes([a_enc, a_dec], full) == pytest.approx(one, abs=64 * KiB)
    assert codec_resident_bytes([a_enc, a_dec, b_enc], full) >= one + 400 * KiB
    assert codec_resident_bytes([helper.make_node("Relu", ["x"], ["y"])], {}) == 0


def test_codec_tables_add_to_the_predicted_growth():
    plain = _predict(GrowthModel([], 0, None, [], nodes=10))
    tabled = _predict(GrowthModel([], 0, None, [], nodes=10, resident=700 * KiB))
    assert tabled.total - plain.total == 700 * KiB and tabled.to_dict()["codec_table_bytes"] == 700 * KiB


# ------------------------------------------------------------------------------------------------ the CLI
def _fake_measure(monkeypatch, figures: list[int]) -> list[dict]:  # noqa: ANN001
    """runtime.measure.measure replaced: returns ``figures`` in turn (the last repeated) and records each call
    with what the measured directory / model file held at that moment."""
    from types import SimpleNamespace

    import onnxcomp.runtime.measure as measure_mod

    calls: list[dict] = []

    def fake_measure(artifact_dir, model=None, steps=5, settings=None, **_kw):  # noqa: ANN001, ANN202
        got = figures[min(len(calls), len(figures) - 1)]
        graph = Path(model) if model else Path(artifact_dir) / "training_model.onnx"
        calls.append({"dir": Path(artifact_dir), "model": model, "settings": settings.to_dict(),
                      "graph_exists": graph.is_file(), "checkpoint_exists": (Path(artifact_dir) / "checkpoint").exists()})
        return SimpleNamespace(growth_bytes=got, peak_bytes=got)

    monkeypatch.setattr(measure_mod, "measure", fake_measure)
    return calls


def test_cli_verify_replans_then_fails_in_one_line_and_writes_nothing(small_artifacts: Path,  # noqa: ANN001
                                                                      tmp_path: Path, monkeypatch, capsys) -> None:
    calls = _fake_measure(monkeypatch, [100 * MiB])
    out = tmp_path / "o"
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--exact", "--budget",
                 "64MiB", "--budget-for", "ort-defaults", "--verify"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len([e for e in err if "error" in e]) == 1, err
    assert "lowest measured is 100.00 MiB" in err[-1] and f"nothing was written to {out}" in err[-1]
    # measured a complete written set beside the output, under ORT's defaults; re-planned lower at least once
    assert len(calls) >= 2 and all(c["graph_exists"] for c in calls)
    assert calls[0]["dir"].parent == tmp_path and calls[0]["dir"] != out
    assert calls[0]["settings"]["arena"] and calls[0]["settings"]["mem_pattern"]
    assert calls[0]["settings"]["execution_order"] == "default"
    # no over-budget plan left at the output, and no staged leftovers beside it
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_cli_verify_keeps_the_users_output_when_no_plan_fits(small_artifacts: Path, tmp_path: Path,  # noqa: ANN001
                                                            monkeypatch, capsys) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "training_model.onnx").write_bytes(b"the user's graph")
    _fake_measure(monkeypatch, [100 * MiB])
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--exact", "--budget",
                 "64MiB", "--budget-for", "ort-defaults", "--verify", "--force"])
    assert code == 2 and "nothing was written" in capsys.readouterr().err
    assert (out / "training_model.onnx").read_bytes() == b"the user's graph"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_cli_verify_publishes_the_plan_that_measured_within(small_artifacts: Path, tmp_path: Path,  # noqa: ANN001
                                                           monkeypatch, capsys) -> None:
    calls = _fake_measure(monkeypatch, [100 * MiB, 10 * MiB])
    out = tmp_path / "o"
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--exact", "--budget",
                 "64MiB", "--budget-for", "ort-defaults", "--verify", "--json"])
    assert code == 0, capsys.readouterr().err
    v = json.loads(capsys.readouterr().out)
    assert v["output"] == str(out / "training_model.onnx") and v["verify"]["fits"]
    assert [a["measured_bytes"] for a in v["verify"]["attempts"]] == [100 * MiB, 10 * MiB] and len(calls) == 2
    plan = json.loads((out / "training_model.plan.json").read_text())
    assert plan["output"] == str(out / "training_model.onnx")      # the final path, not the staged one
    assert (out / "checkpoint").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_cli_verify_over_an_existing_output_measures_a_complete_set(small_artifacts: Path, tmp_path: Path,  # noqa: ANN001
                                                                   monkeypatch, capsys) -> None:
    # The staged set leaves out the files the old output already has (they are carried over when it is
    # published); the set measured before publishing must hold them, or ORT finds no checkpoint.
    out = tmp_path / "o"
    _fake_measure(monkeypatch, [10 * MiB])
    args = ["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--exact", "--budget", "64MiB",
            "--budget-for", "ort-defaults", "--verify"]
    assert main(args) == 0, capsys.readouterr().err
    calls = _fake_measure(monkeypatch, [10 * MiB])
    assert main([*args, "--force"]) == 0, capsys.readouterr().err
    assert calls and all(c["graph_exists"] and c["checkpoint_exists"] for c in calls)
    assert (out / "checkpoint").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_cli_verify_of_a_model_file_measures_a_temporary_copy(small_artifacts: Path, tmp_path: Path,  # noqa: ANN001
                                                             monkeypatch, capsys) -> None:
    import shutil

    art = tmp_path / "art"
    shutil.copytree(small_artifacts, art)
    before = sorted(p.name for p in art.iterdir())
    calls = _fake_measure(monkeypatch, [100 * MiB])
    out = art / "planned.onnx"
    code = main(["transform", str(art), "-o", str(out), "--policy", "auto", "--exact", "--budget", "64MiB",
                 "--budget-for", "ort-defaults", "--verify"])
    assert code == 2 and "nothing was written" in capsys.readouterr().err
    assert calls and all(c["dir"] == art and c["graph_exists"] and Path(c["model"]).parent == art
                         and Path(c["model"]).name.startswith(".planned.onnx.tmp-") for c in calls)
    assert sorted(p.name for p in art.iterdir()) == before        # temporary copies removed, nothing published
    calls = _fake_measure(monkeypatch, [1 * MiB])
    assert main(["transform", str(art), "-o", str(out), "--policy", "auto", "--exact", "--budget", "64MiB",
                 "--budget-for", "ort-defaults", "--verify"]) == 0
    assert out.is_file() and sorted(p.name for p in art.iterdir()) == sorted(before + ["planned.onnx",
                                                                                      "planned.plan.json"])


@pytest.mark.slow
def test_cli_verify_measures_the_written_graph_within_the_budget(small_artifacts: Path, tmp_path: Path,  # noqa: ANN001
                                                                  capsys) -> None:
    out = tmp_path / "o"
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--exact", "--budget",
                 "64MiB", "--budget-for", "ort-defaults", "--verify", "--json"])
    assert code == 0
    v = json.loads(capsys.readouterr().out)["verify"]
    assert v["fits"] and v["figure"] == "growth_bytes" and 0 < v["measured_bytes"] <= 64 * MiB


def test_codec_tables_are_measured_without_emptying_the_planners_caches(monkeypatch):
    from onnxcomp.custom_ops import maxpool_index
    from onnxcomp.planner import ort_growth

    enc, full = _pool_index_op("c", "encode", 8, 32, 15, 7)
    cleared: list[object] = []
    monkeypatch.setattr(ort_growth, "_clear_codec_caches", lambda mods: cleared.append(mods))
    maxpool_index.fast_tables.cache_clear()
    ort_growth._RESIDENT.clear()
    assert codec_resident_bytes([enc], full) > 0
    assert not cleared       # measured in a child process
    # and the in-process measurement is the same figure
    monkeypatch.undo()
    assert measure_codec_resident([("encode", "maxpool_index", enc.attribute[0].s.decode(), (8, 32, 7, 7))]) == \
        pytest.approx(codec_resident_bytes([enc], full), abs=16 * KiB)


def test_cli_verify_of_a_total_budget_counts_the_set_up_the_plan_adds(small_artifacts: Path, tmp_path: Path,  # noqa: ANN001
                                                                      monkeypatch, capsys) -> None:
    # --budget-for ort-defaults-total: the figure checked is the plan's growth plus its set-up RSS less the input
    # graph's (measured once, in its own process, under the same settings)
    from types import SimpleNamespace

    import onnxcomp.runtime.measure as measure_mod

    out = tmp_path / "o"
    calls: list[Path] = []

    def fake_measure(artifact_dir, model=None, steps=5, settings=None, **_kw):  # noqa: ANN001, ANN202
        calls.append(Path(artifact_dir))
        assert steps == 3              # the set-up RSS holds the steps' batches: the same count on both sides
        assert settings.to_dict()["arena"] and settings.to_dict()["execution_order"] == "default"
        set_up = 80 * MiB if Path(artifact_dir) == small_artifacts else 85 * MiB
        return SimpleNamespace(growth_bytes=10 * MiB, peak_bytes=10 * MiB, rss_setup_bytes=set_up)

    monkeypatch.setattr(measure_mod, "measure", fake_measure)
    code = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "auto", "--exact", "--budget",
                 "64MiB", "--budget-for", "ort-defaults-total", "--verify", "--json"])
    assert code == 0
    v = json.loads(capsys.readouterr().out)["verify"]
    assert v["fits"] and v["figure"] == "growth_bytes + set-up added" and v["measured_bytes"] == 15 * MiB
    # the plan measured where it was staged beside the output, then the input graph
    assert len(calls) == 2 and calls[0].parent == tmp_path and calls[1] == small_artifacts


def test_measurement_children_parse_with_the_users_protobuf_not_the_one_an_import_set(monkeypatch) -> None:
    # importing onnxruntime_extensions sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ; a child
    # started after that parsed its graph with pure-Python protobuf (+2.2 MiB set-up RSS on a 304-node graph)
    import onnxcomp
    from onnxcomp.runtime.measure import MALLOC_ENV, child_env

    monkeypatch.setenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
    monkeypatch.setattr(onnxcomp, "USER_PROTOBUF_IMPLEMENTATION", None)
    env = child_env()
    assert "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION" not in env and env["MALLOC_MMAP_THRESHOLD_"] == \
        MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"]
    monkeypatch.setattr(onnxcomp, "USER_PROTOBUF_IMPLEMENTATION", "python")      # the user asked for it: kept
    assert child_env()["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] == "python"
