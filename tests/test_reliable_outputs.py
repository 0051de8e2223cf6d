"""Outputs and input checks (issue 17, items 2, 3, 4, 6): bad parameters refused at transform time, outputs
checked before any work, directory outputs swapped in whole, one winner among concurrent writers."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

import onnx
import pytest

from onnxcomp.cli import main
from onnxcomp.errors import OnnxcompError, OutputExistsError
from onnxcomp.fileio import OutputLock, staged_directory
from onnxcomp.transform import transform


def _one_line_error(capsys: pytest.CaptureFixture[str], rc: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.mark.parametrize("eb", ["inf", "1e308", "nan"])
def test_transform_refuses_an_error_bound_the_codec_would_refuse(small_artifacts: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str], eb: str) -> None:
    out = tmp_path / "x.onnx"
    rc = main(["transform", str(small_artifacts), "-o", str(out), "--policy", "comet", "--eb", eb])
    _one_line_error(capsys, rc, "eb must be a finite float")
    assert not out.exists() and not out.with_suffix(".plan.json").exists()


def test_codec_params_are_checked_where_the_rewrite_writes_them() -> None:
    from onnxcomp.custom_ops import checked_params

    assert checked_params("sz", {"eb": 1e-3, "key": "t"}, "t") == {"eb": 1e-3, "key": "t", "tensor": "t"}
    with pytest.raises(OnnxcompError, match="relu_1: codec params refused"):
        checked_params("sz", {"eb": float("inf")}, "relu_1")
    with pytest.raises(OnnxcompError, match="maxpool_index"):
        checked_params("maxpool_index", {"input_shape": [1, 1, 4, 4], "kernel_shape": [0, 2]}, "pool")


def test_negative_size_reaches_the_size_check(small_artifacts: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["transform", str(small_artifacts), "-o", str(tmp_path / "x.onnx"), "--policy", "rows",
              "--budget", "-5MiB"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "'-5MiB'" in err and "expected one argument" not in err


def test_rows_beyond_every_chain_is_refused_not_clamped(small_artifacts: Path, tmp_path: Path) -> None:
    with pytest.raises(OnnxcompError, match="rows=100000: the tallest row-split chain has"):
        transform(small_artifacts, tmp_path / "x.onnx", "rows", rows=100000)


def test_unwritable_output_is_refused_before_transforming(small_artifacts: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import onnxcomp.transform as tr

    monkeypatch.setattr(tr, "transform_model", lambda *a, **k: pytest.fail("transform ran before the check"))
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    for out in (a_file / "x.onnx", a_file / "sub" / "dir", Path("/proc/onnxcomp-x.onnx")):
        rc = main(["transform", str(small_artifacts), "-o", str(out)])
        _one_line_error(capsys, rc, str(out))


def test_vendor_ops_are_not_taken_for_ort_gradient_ops(small_artifacts: Path) -> None:
    from onnxcomp.analysis import analyze_model

    model = onnx.load(str(small_artifacts / "training_model.onnx"))
    relu_grad = next(n for n in model.graph.node if n.op_type == "ReluGrad")
    stashed = relu_grad.input[1]
    before = next(s for s in analyze_model(model).stashed if s.name == stashed)
    assert "ReluGrad" in before.backward_consumer_ops and "signbits" in before.encodings
    relu_grad.domain = "com.unknownvendor"
    model.opset_import.append(onnx.helper.make_opsetid("com.unknownvendor", 1))
    after = next(s for s in analyze_model(model).stashed if s.name == stashed)
    assert "ReluGrad" not in after.backward_consumer_ops and "signbits" not in after.encodings


def test_artifacts_error_speaks_the_callers_language(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnxcomp.models.artifacts import generate_artifacts

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError) as info:
        generate_artifacts("resnet18", 2, 32, 10, busy, smoke_test=False)
    assert "overwrite=True" in str(info.value) and "--" not in str(info.value)
    rc = main(["artifacts", "--model", "resnet18", "--batch", "2", "--image", "32", "--classes", "10",
               "-o", str(busy)])
    err = _one_line_error(capsys, rc, "--force")
    assert "overwrite=True" not in err
    assert (busy / "keep.txt").read_text() == "mine"


# -- concurrency and atomic sets --------------------------------------------------------------------------------
def test_two_concurrent_writers_exactly_one_wins(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "same.onnx"
    barrier = threading.Barrier(2)
    results: list[object] = []

    def run() -> None:
        barrier.wait()
        try:
            transform(small_artifacts, out, "lossless")
            results.append("ok")
        except OutputExistsError as exc:
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1, results
    loser = next(r for r in results if r != "ok")
    assert "being written by another onnxcomp run" in str(loser) or "already exists" in str(loser)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.onnx", "same.plan.json"]


def test_lock_refuses_a_second_holder_and_cleans_after_killed_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (tmp_path / ".out.tmp-dead").mkdir()            # a killed run's staging directory
    (tmp_path / ".out.tmp-dead" / "checkpoint").write_bytes(b"x" * 100)
    (tmp_path / ".out.abc.tmp").write_bytes(b"partial")  # a killed run's temp file
    with OutputLock(out):
        assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock"]
        with pytest.raises(OutputExistsError, match="being written by another onnxcomp run"):
            OutputLock(out).acquire()
    assert list(tmp_path.iterdir()) == []


def test_failed_directory_rewrite_leaves_the_complete_old_set(small_artifacts: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "art"
    transform(small_artifacts, out, "comet", min_bytes=1000)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import onnxcomp.runtime.checkpoint as ck

    def dies(*args: object, **kwargs: object) -> None:  # after the new checkpoint was written
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "write_split_eval_model", dies)
    with pytest.raises(KeyboardInterrupt):
        transform(small_artifacts, out, "comet", min_bytes=1000, split_weight_bytes=2048, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # was: new checkpoint, old graph
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]
    monkeypatch.undo()
    transform(small_artifacts, out, "comet", min_bytes=1000, split_weight_bytes=2048, force=True)
    assert (out / "checkpoint").read_bytes() != before["checkpoint"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def test_staged_directory_keeps_unrelated_files_and_swaps_atomically(tmp_path: Path) -> None:
    out = tmp_path / "d"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    (out / "a").write_text("old")
    with staged_directory(out, replace=True, carry_over=True) as stage:
        (stage / "a").write_text("new")
        assert (out / "a").read_text() == "old"
    assert (out / "a").read_text() == "new" and (out / "mine.txt").read_text() == "keep"
    with pytest.raises(OutputExistsError):
        with staged_directory(out) as stage:
            (stage / "a").write_text("newer")
    assert (out / "a").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    shutil.rmtree(out)


def test_held_flock_excludes_other_holders_only_while_held(tmp_path: Path) -> None:
    import fcntl

    from onnxcomp.fileio import held_flock

    lock = tmp_path / "timing.lock"

    def try_lock() -> bool:
        with open(lock, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(fh, fcntl.LOCK_UN)
            return True

    with held_flock(lock):
        assert not try_lock()
    assert try_lock()
    assert lock.exists()  # left for the next waiter
    with held_flock(None):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timing.lock"]
