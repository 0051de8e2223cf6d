"""One-line errors (exit 2) for the mistakes a new user makes, and help that lists what exists."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from onnxcomp.cli import main


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def test_unwritable_outputs(small_artifacts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, ["params", str(small_artifacts), "-o", "/dev/null/p.npz"], "not a directory")
    _one_line_error(capsys, ["inspect", str(small_artifacts), "--plot", "/dev/null/x.png"], "--plot")
    _one_line_error(capsys, ["artifacts", "--model", "resnet18", "-o", "/dev/null/a"], "-o /dev/null/a")
    _one_line_error(capsys, ["demo", "--json", "/dev/null/d.json"], "--json")


def test_names_files_and_corrupt_models(small_artifacts: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "art"
    shutil.copytree(small_artifacts, d)
    (d / "broken.onnx").write_bytes((d / "training_model.onnx").read_bytes()[:2000])
    _one_line_error(capsys, ["measure", str(d), "--model", "broken.onnx"], "not a readable ONNX model")
    _one_line_error(capsys, ["train", str(d / "training_model.onnx")], "is a file", "--model training_model.onnx")
    _one_line_error(capsys, ["measure", str(d), "--model", "nope.onnx"], "it has: broken.onnx")
    _one_line_error(capsys, ["transform", str(d / "optimizer_model.onnx"), "-o", str(tmp_path / "x.onnx")],
                    "optimizer model")
    assert not (tmp_path / "x.onnx").exists()


def test_transform_help_lists_policies(capsys: pytest.CaptureFixture[str]) -> None:
    from onnxcomp.passes import POLICIES

    with pytest.raises(SystemExit):
        main(["transform", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(p in text for p in POLICIES)


def test_demo_removes_its_temporary_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxcomp import commands

    seen: list[Path] = []

    def fake_demo(args, console, work: Path) -> int:  # noqa: ANN001
        (work / "artifact").write_text("x")
        seen.append(work)
        raise KeyboardInterrupt  # even an interrupted demo leaves nothing behind

    monkeypatch.setattr(commands, "_demo", fake_demo)
    assert main(["demo"]) == 130
    assert seen and not seen[0].exists()
