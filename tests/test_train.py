"""Training runner: synthetic and digits data, accuracy, and bit-exact determinism."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import insert_test_op_after

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime import pyops
from onnxcomp.runtime.data import digits_dataset, graph_data, synthetic_batches
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.train import train


def test_train_synthetic(small_artifacts: Path) -> None:
    r = train(small_artifacts, steps=3, data="synthetic", progress=False)
    assert r.steps == 3 and len(r.losses) == 3 and all(math.isfinite(v) for v in r.losses)
    assert r.accuracy is None and r.parameters is None
    d = json.loads(json.dumps(r.to_dict()))
    assert d["settings"] == RuntimeSettings().to_dict() and d["data"] == "synthetic"


def test_train_digits_learns(small_artifacts: Path) -> None:
    r = train(small_artifacts, steps=150, data="digits", eval_every=75, progress=False)
    assert r.accuracy_source.startswith("eval model")
    assert [s for s, _ in r.accuracy_history] == [75, 150]
    assert r.accuracy is not None and r.accuracy > 0.5  # chance is 0.1; ~0.85 seen after 100 steps
    assert np.mean(r.losses[-20:]) < np.mean(r.losses[:20])


def test_train_is_bit_deterministic(small_artifacts: Path) -> None:
    kw = dict(steps=6, data="digits", progress=False, return_parameters=True, seed=3)
    a = train(small_artifacts, **kw)
    b = train(small_artifacts, **kw)
    assert a.losses == b.losses
    assert a.parameters is not None and a.parameters.tobytes() == b.parameters.tobytes()
    c = train(small_artifacts, **{**kw, "seed": 4})
    assert c.losses != a.losses


def test_train_with_pyop_in_training_graph(small_artifacts: Path, tmp_path: Path) -> None:
    # An identity PyOp inside the training graph: runs in the Module and changes nothing, bit for bit.
    patched = insert_test_op_after(small_artifacts / "training_model.onnx", tmp_path / "patched.onnx")
    kw = dict(steps=4, data="synthetic", progress=False, return_parameters=True)
    base = train(small_artifacts, **kw)
    calls = pyops.calls
    mod = train(small_artifacts, model=patched, **kw)
    assert pyops.calls - calls == 4  # once per training step
    assert mod.losses == base.losses and mod.parameters.tobytes() == base.parameters.tobytes()


def test_train_errors(small_artifacts: Path) -> None:
    with pytest.raises(OnnxcompError, match="unknown data source"):
        train(small_artifacts, steps=1, data="imagenet")
    with pytest.raises(OnnxcompError, match="not found"):
        train(small_artifacts, steps=1, model="missing.onnx")


def test_data_helpers(small_artifacts: Path) -> None:
    spec = graph_data(small_artifacts, small_artifacts / "training_model.onnx", ["input", "labels"])
    assert spec.image.shape == (4, 3, 16, 16) and spec.labels.shape == (4,) and spec.classes == 10
    x, y = next(synthetic_batches(spec.image.shape, 10, seed=0))
    assert x.shape == (4, 3, 16, 16) and x.dtype == np.float32 and y.dtype == np.int64
    assert ((0 <= y) & (y < 10)).all()
    ds = digits_dataset((4, 3, 16, 16), 10)
    assert ds.x_train.shape[1:] == (4, 3, 16, 16) and ds.y_train.shape[1] == 4
    assert ds.x_train.shape[0] * 4 + ds.x_test.shape[0] * 4 <= 1797
    assert abs(float(ds.x_train.mean())) < 0.1 and set(np.unique(ds.y_test)) <= set(range(10))


def test_linear_warmup_decay_sets_each_steps_rate(small_artifacts: Path) -> None:
    # The rate ORT's optimizer holds before each step: up over the warm-up, then down to peak/(total-warmup);
    # a resumed schedule (done=2) starts at step 3's rate.
    from onnxcomp.runtime.train import _schedule
    from onnxcomp.runtime.training_session import open_training_session

    peak = 4e-3
    batches = synthetic_batches((4, 3, 16, 16), 10, seed=0)
    for done, expected in ((0, [2e-3, 4e-3, 4e-3, 8e-3 / 3, 4e-3 / 3]), (2, [4e-3, 8e-3 / 3, 4e-3 / 3])):
        session = open_training_session(small_artifacts / "training_model.onnx", small_artifacts / "checkpoint",
                                        small_artifacts / "optimizer_model.onnx", learning_rate=peak)
        _schedule(session, 2, total=5, done=done)
        rates = []
        for _ in expected:
            rates.append(session.optimizer.get_learning_rate())
            session.step(*next(batches))
        assert rates == pytest.approx(expected, rel=1e-6)
        session.close()


def test_train_warmup_schedule(small_artifacts: Path) -> None:
    kw = dict(steps=4, data="synthetic", progress=False, return_parameters=True, learning_rate=1e-2)
    constant = train(small_artifacts, **kw)
    a = train(small_artifacts, warmup_steps=2, **kw)
    b = train(small_artifacts, warmup_steps=2, **kw)
    assert a.warmup_steps == 2 and a.to_dict()["warmup_steps"] == 2
    assert a.parameters.tobytes() == b.parameters.tobytes()
    assert a.losses[0] == constant.losses[0] and a.parameters.tobytes() != constant.parameters.tobytes()
    with pytest.raises(OnnxcompError, match="warmup_steps must be in"):
        train(small_artifacts, steps=4, warmup_steps=4, progress=False)
