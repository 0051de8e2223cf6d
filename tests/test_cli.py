"""CLI smoke tests and bad-input handling: one clear line on stderr, exit code 2, never a traceback."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from onnxcomp.cli import main

EXPECTED_PARAMS = {"alexnet": 61_100_840, "vgg16": 138_357_544, "resnet18": 11_689_512,
                   "resnet50": 25_557_032, "mobilenet_v2": 3_504_872}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxcomp", *args], capture_output=True, text=True,
                          timeout=600)


def test_models_json(capsys) -> None:
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["parameters"] for r in rows if r["name"] in EXPECTED_PARAMS} == EXPECTED_PARAMS
    assert {"vit_tiny", "gpt_tiny"} <= {r["name"] for r in rows}


def test_inspect_table_json_and_plot(small_artifacts: Path, tmp_path: Path, capsys) -> None:
    png = tmp_path / "live.png"
    assert main(["inspect", str(small_artifacts), "--json", "--plot", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert report["stashed"] and {"name", "shape", "bytes", "pattern", "encodings"} <= set(report["stashed"][0])
    p = report["planner"]
    assert p["lower_bound_bytes"] <= p["offset_bytes"] and p["lower_bound_bytes"] <= p["cntk_bytes"]
    # Views (Flatten of a stashed map) are listed but share their source's buffer: counted once there.
    assert 0 < report["breakdown"]["stashed"] <= sum(s["bytes"] for s in report["stashed"])
    assert main(["inspect", str(small_artifacts / "training_model.onnx")]) == 0
    out = capsys.readouterr().out
    assert "Relu-input→ReluGrad" in out and "lower bound" in out


def _assert_clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_bad_inputs(small_artifacts: Path, tmp_path: Path) -> None:
    _assert_clean_error(run_cli("inspect", str(tmp_path / "missing.onnx")), "no such file")
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 20)
    _assert_clean_error(run_cli("inspect", str(text)), "not a readable ONNX model")
    full = (small_artifacts / "training_model.onnx").read_bytes()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(full[: len(full) // 3])
    _assert_clean_error(run_cli("inspect", str(truncated)), "truncated")
    _assert_clean_error(run_cli("inspect", str(small_artifacts / "eval_model.onnx")), "inference-only")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    _assert_clean_error(run_cli("inspect", str(empty_dir)), "no training_model.onnx")
    _assert_clean_error(run_cli("measure", str(empty_dir), "--steps", "1"))
    _assert_clean_error(run_cli("transform", str(truncated), "-o", str(tmp_path / "x.onnx")), "truncated")
    _assert_clean_error(run_cli("artifacts", "--model", "lenet", "-o", str(tmp_path / "a")), "lenet")


def test_transform_refuses_to_overwrite(small_artifacts: Path, tmp_path: Path) -> None:
    work = tmp_path / "art"
    shutil.copytree(small_artifacts, work)
    before = (work / "training_model.onnx").read_bytes()
    _assert_clean_error(run_cli("transform", str(work), "-o", str(work)), "refusing to overwrite")
    assert (work / "training_model.onnx").read_bytes() == before


def test_measure_text_output_says_how_it_timed(small_artifacts: Path, capsys) -> None:
    assert main(["measure", str(small_artifacts), "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "training-step peak:" in out and "MiB" in out and "step time (median):" in out
    assert "mmap threshold is pinned" in out and "onnxcomp train" in out
    assert "settings: arena=False" in out


def test_lift_convs_reaches_the_reuse_pass_unless_turned_off(small_artifacts: Path, tmp_path: Path,
                                                              monkeypatch) -> None:
    """`transform --lift-convs/--no-lift-convs` is the one switch for the convolution lift (same bits, same kernel
    time since the axis goes in front): on unless turned off, passed through to the ReuseSignaturePass transform
    runs last."""
    from onnxcomp.passes.reuse_signature import ReuseSignaturePass

    built: list[bool] = []
    original_init = ReuseSignaturePass.__init__

    def spy(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        built.append(self.lift_convs)

    monkeypatch.setattr(ReuseSignaturePass, "__init__", spy)
    # Per transform the pass may be built twice: where a MaxPool is liftable, the last passes run with and without
    # the lift (passes/planar_pool.finish_with_pool_gate). Every instance gets the switch.
    for name, flags, expected in [("a", [], True), ("b", ["--lift-convs"], True), ("c", ["--no-lift-convs"], False)]:
        built.clear()
        assert main(["transform", str(small_artifacts), "-o", str(tmp_path / f"{name}.onnx"), "--policy",
                     "lossless", *flags]) == 0
        assert built and set(built) == {expected}
