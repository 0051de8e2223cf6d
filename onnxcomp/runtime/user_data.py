"""A user's own training data for `onnxcomp train --data`: a .npz with x/y arrays, or a directory of images
with one sub-directory per class (ImageFolder layout). Shaped into whole batches for the graph's static input,
split into train/test (seeded), standardised with the train split's statistics. NumPy and Pillow only: the
training runtime does not import torch."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from onnxcomp.errors import OnnxcompError
from onnxcomp.runtime.data import Dataset

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def is_user_data(source: str) -> bool:
    return source not in ("synthetic", "digits")


def load_user_dataset(source: str | Path, input_shape: tuple[int, ...], classes: int, *,
                      test_fraction: float = 0.2, split_seed: int = 0) -> Dataset:
    path = Path(source)
    if not path.exists():
        raise OnnxcompError(f"--data {source}: no such file or directory; use synthetic, digits, a .npz file with "
                            "x and y arrays, or a directory with one sub-directory of images per class")
    x, y = _read_npz(path, input_shape) if path.is_file() else _read_image_dir(path, input_shape)
    if y.min(initial=0) < 0 or y.max(initial=0) >= classes:
        raise OnnxcompError(f"--data {source}: labels span {int(y.min())}..{int(y.max())} but the model has "
                            f"{classes} classes")
    return _split(x, y, input_shape[0], test_fraction, split_seed, str(source))


def _read_npz(path: Path, input_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path) as z:
            if "x" not in z.files or "y" not in z.files:
                raise OnnxcompError(f"--data {path}: the archive holds {z.files}; it needs arrays named x and y")
            x, y = z["x"], z["y"]
    except (OSError, ValueError) as exc:
        raise OnnxcompError(f"--data {path}: not a readable .npz archive ({exc})") from None
    sample = tuple(input_shape[1:])
    if x.shape[1:] != sample:
        raise OnnxcompError(f"--data {path}: x has samples of shape {list(x.shape[1:])}, the graph takes "
                            f"{list(sample)}; reshape or resize the data to match")
    if y.ndim != 1 or len(y) != len(x):
        raise OnnxcompError(f"--data {path}: y must be one integer label per sample ({len(x)}), got shape "
                            f"{list(y.shape)}")
    if not np.issubdtype(y.dtype, np.integer):
        raise OnnxcompError(f"--data {path}: y holds {y.dtype}; class labels must be integers")
    return x.astype(np.float32, copy=False), y.astype(np.int64)


def _read_image_dir(path: Path, input_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    if len(input_shape) != 4 or input_shape[1] not in (1, 3):
        raise OnnxcompError(f"--data {path}: an image directory needs a graph input [batch, 1 or 3, H, W], this "
                            f"one takes {list(input_shape)}")
    _, channels, height, width = input_shape
    class_dirs = sorted(d for d in path.iterdir() if d.is_dir())
    if not class_dirs:
        raise OnnxcompError(f"--data {path}: no class sub-directories; lay it out as {path}/CLASS/IMAGE.png")
    xs, ys = [], []
    for label, d in enumerate(class_dirs):
        for f in sorted(d.iterdir()):
            if f.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            try:
                with Image.open(f) as im:
                    im = im.convert("RGB" if channels == 3 else "L").resize((width, height), Image.BILINEAR)
                    arr = np.asarray(im, dtype=np.float32) / 255.0
            except OSError as exc:
                raise OnnxcompError(f"--data {f}: not a readable image ({exc})") from None
            xs.append(arr.transpose(2, 0, 1) if channels == 3 else arr[None])
            ys.append(label)
    if not xs:
        raise OnnxcompError(f"--data {path}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in its class directories")
    return np.stack(xs), np.asarray(ys, dtype=np.int64)


def _split(x: np.ndarray, y: np.ndarray, batch: int, test_fraction: float, seed: int, where: str) -> Dataset:
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(len(y) * test_fraction))
    if len(y) - n_test < batch:
        raise OnnxcompError(f"--data {where}: {len(y)} samples leave {len(y) - n_test} for training, fewer than one "
                            f"batch of {batch}")
    test_idx, train_idx = order[:n_test], order[n_test:]
    mean, std = float(x[train_idx].mean()), float(x[train_idx].std()) or 1.0
    x = ((x - mean) / std).astype(np.float32)

    def batched(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = (len(idx) // batch) * batch
        idx = idx[:n]
        return (np.ascontiguousarray(x[idx].reshape(-1, batch, *x.shape[1:])), y[idx].reshape(-1, batch))

    x_train, y_train = batched(train_idx)
    x_test, y_test = batched(test_idx)
    return Dataset(x_train, y_train, x_test, y_test)
