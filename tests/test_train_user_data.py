"""`onnxcomp train --save DIR` resumes exactly; `--data` reads a .npz or a directory of images per class."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.train import train
from onnxcomp.runtime.user_data import load_user_dataset


def test_resume_continues_as_an_uninterrupted_run(small_artifacts: Path, tmp_path: Path) -> None:
    kw = dict(data="digits", progress=False, return_parameters=True, seed=1)
    straight = train(small_artifacts, steps=2, **kw)
    first = train(small_artifacts, steps=1, save_dir=tmp_path / "run", **kw)
    second = train(small_artifacts, steps=1, save_dir=tmp_path / "run", **kw)
    assert first.losses + second.losses == straight.losses
    assert second.parameters.tobytes() == straight.parameters.tobytes()
    assert (tmp_path / "run" / "progress.json").exists()
    with pytest.raises(OnnxcompError, match="holds a run of"):
        train(small_artifacts, steps=1, model=small_artifacts / "eval_model.onnx", save_dir=tmp_path / "run",
              progress=False)


def test_npz_and_image_directory(small_artifacts: Path, tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, size=40)
    x = rng.standard_normal((40, 3, 16, 16)).astype(np.float32) + y[:, None, None, None]  # learnable
    np.savez(tmp_path / "d.npz", x=x, y=y)
    r = train(small_artifacts, steps=3, data=str(tmp_path / "d.npz"), progress=False)
    assert len(r.losses) == 3 and r.accuracy is not None and "held-out" in r.accuracy_source

    for label in ("cat", "dog"):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for i in range(6):
            value = 40 if label == "cat" else 200
            Image.fromarray(np.full((20, 24, 3), value + i, dtype=np.uint8)).save(tmp_path / "imgs" / label / f"{i}.png")
    ds = load_user_dataset(tmp_path / "imgs", (4, 3, 16, 16), 10)
    assert ds.x_train.shape[1:] == (4, 3, 16, 16) and set(np.unique(ds.y_train)) <= {0, 1}
    r = train(small_artifacts, steps=2, data=str(tmp_path / "imgs"), progress=False)
    assert len(r.losses) == 2 and r.accuracy is None and "less than one batch" in r.accuracy_source

    np.savez(tmp_path / "bad.npz", x=x[:, :, :8], y=y)
    with pytest.raises(OnnxcompError, match="reshape or resize"):
        load_user_dataset(tmp_path / "bad.npz", (4, 3, 16, 16), 10)
    with pytest.raises(OnnxcompError, match="unknown data source"):
        train(small_artifacts, steps=1, data="imagenet", progress=False)
