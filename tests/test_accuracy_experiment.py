"""tools/accuracy_experiment.py's plumbing: the progress flag reaches train(), --merge pairs only like runs."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

_TOOL = Path(__file__).parents[1] / "tools" / "accuracy_experiment.py"


def _tool():
    spec = importlib.util.spec_from_file_location("_tool_accuracy_experiment", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Result:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def to_dict(self) -> dict[str, Any]:
        return {"accuracy": 0.5 + self.seed / 100, "losses": [2.3, 1.0], "step_time_s": 0.01,
                "accuracy_history": [[2, 0.5 + self.seed / 100]], "bounds": None}


@pytest.mark.parametrize("flag", [[], ["--progress"]])
def test_progress_flag_reaches_every_training_run(flag, tmp_path, monkeypatch):
    import onnxcomp.runtime.train as train_module

    tool = _tool()
    calls: list[dict[str, Any]] = []

    def fake_train(run_dir, **kw):
        calls.append(kw)
        return _Result(kw["seed"])

    monkeypatch.setattr(train_module, "train", fake_train)
    art = tmp_path / "vgg16-b32-32px-c10"
    art.mkdir()
    (art / "training_model.onnx").write_bytes(b"")   # present: run() does not generate artifacts
    args = tool.parser().parse_args(["--model", "vgg16", "--steps", "2", "--seeds", "0", "1", "--policies",
                                     "--lr", "1e-4", "--workdir", str(tmp_path), *flag])
    result = tool.run(args)
    assert [c["seed"] for c in calls] == [0, 1]
    assert all(c["progress"] is bool(flag) and c["learning_rate"] == 1e-4 for c in calls)
    assert result["lr"] == 1e-4 and result["table"]["baseline"]["runs"] == [50.0, 51.0]


def _part(path: Path, label: str, seeds: list[int], lr: float | None) -> Path:
    runs = [_Result(s).to_dict() for s in seeds]
    path.write_text(json.dumps({"model": "vgg16", "image": 32, "batch": 32, "steps": 2, "seeds": seeds, "lr": lr,
                                "transforms": {}, "runs": {label: runs}, "table": {}}))
    return path


def test_merge_pairs_seeds_and_refuses_another_learning_rate(tmp_path):
    tool = _tool()
    base = [_part(tmp_path / f"b{s}.json", "baseline", [s], 1e-4) for s in (1, 0)]   # out of seed order
    auto = _part(tmp_path / "a.json", "auto@84.5", [0, 1], 1e-4)
    merged = tool.merge([auto, *base])
    assert list(merged["runs"]) == ["baseline", "auto@84.5"] and merged["seeds"] == [0, 1]
    assert merged["table"]["baseline"]["runs"] == [50.0, 51.0]      # sorted by seed, so deltas pair
    other = _part(tmp_path / "other.json", "auto@84.5", [0, 1], None)   # the optimizer model's default rate
    with pytest.raises(SystemExit, match="learning rate"):
        tool.merge([*base, other])


@pytest.mark.parametrize("policy,extra", [("auto@12.5", {}), ("auto-growth@13.5", {"budget_for": "ort-defaults"})])
def test_budget_policies_plan_their_own_directory(policy, extra, tmp_path, monkeypatch):
    import onnxcomp.runtime.train as train_module
    import onnxcomp.transform as transform_module

    tool = _tool()
    planned: list[tuple[Path, dict[str, Any]]] = []
    trained: list[Path] = []

    class _Done:
        records: list[dict[str, Any]] = []
        before = after = {"stashed_bytes": 0, "offset_bytes": 0}

    def fake_transform(art, out, pol, **kw):
        planned.append((Path(out), dict(kw, policy=pol)))
        return _Done()

    def fake_train(run_dir, **kw):
        trained.append(Path(run_dir))
        assert kw["model"] is None           # the plan's own directory: its checkpoint, not the source's
        return _Result(kw["seed"])

    monkeypatch.setattr(transform_module, "transform", fake_transform)
    monkeypatch.setattr(train_module, "train", fake_train)
    art = tmp_path / "resnet18-b32-64px-c10"
    art.mkdir()
    (art / "training_model.onnx").write_bytes(b"")
    size = float(policy.split("@")[1])
    args = tool.parser().parse_args(["--image", "64", "--steps", "2", "--seeds", "0", "--no-baseline",
                                     "--policies", policy, "--workdir", str(tmp_path)])
    tool.run(args)
    out = art / policy.replace("@", "_")
    assert planned == [(out, {"policy": "auto", "force": True, "budget_bytes": int(size * 2**20), **extra})]
    assert trained == [out]
