"""Training data for ORT training graphs: seeded synthetic batches and scikit-learn's digits."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from onnxcomp.errors import OnnxcompError

DEFAULT_CLASSES = 10
_ONNX_TO_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
}


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class GraphData:
    """What a training graph expects: its image input, label input and class count."""

    image: InputSpec
    labels: InputSpec
    classes: int
    classes_inferred: bool  # True when the class count was a default guess, not read from the model

    @property
    def batch(self) -> int:
        return self.image.shape[0]


def _spec(value: onnx.ValueInfoProto, where: Path) -> InputSpec:
    tt = value.type.tensor_type
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            raise OnnxcompError(
                f"input {value.name!r} of {where} has a dynamic dimension {d.dim_param or '?'}; "
                "export the model with static shapes (onnxcomp needs a fixed batch)"
            )
        dims.append(d.dim_value)
    if tt.elem_type not in _ONNX_TO_NUMPY:
        raise OnnxcompError(f"input {value.name!r} of {where} has unsupported element type {tt.elem_type}")
    return InputSpec(value.name, tuple(dims), np.dtype(_ONNX_TO_NUMPY[tt.elem_type]))


def _read_meta(artifact_dir: Path) -> dict:
    path = artifact_dir / "onnxcomp.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise OnnxcompError(f"cannot read {path}: {exc}; fix or delete the file") from exc


def _classes_from_graph(graph: onnx.GraphProto) -> int | None:
    """Class count = last dim of the logits feeding SoftmaxCrossEntropyLoss, if shape info has it."""
    logits = next((n.input[0] for n in graph.node if n.op_type == "SoftmaxCrossEntropyLoss"), None)
    if logits is None:
        return None
    for vi in list(graph.value_info) + list(graph.output):
        if vi.name == logits:
            dims = vi.type.tensor_type.shape.dim
            if dims and dims[-1].HasField("dim_value") and dims[-1].dim_value > 0:
                return dims[-1].dim_value
    # No shape info: the Gemm producing the logits has its weight as a graph input with a shape.
    producer = next((n for n in graph.node if logits in n.output), None)
    if producer is not None and producer.op_type == "Gemm" and len(producer.input) >= 2:
        trans_b = next((a.i for a in producer.attribute if a.name == "transB"), 0)
        for vi in list(graph.input) + list(graph.initializer):
            if vi.name == producer.input[1]:
                dims = list(vi.dims) if isinstance(vi, onnx.TensorProto) else [
                    d.dim_value for d in vi.type.tensor_type.shape.dim]
                if len(dims) == 2 and min(dims) > 0:
                    return dims[0] if trans_b else dims[1]
    return None


def graph_data(artifact_dir: str | Path, model_path: str | Path, user_inputs: list[str]) -> GraphData:
    """Describe the data a training graph takes. user_inputs: Module.input_names() (image, labels)."""
    artifact_dir, model_path = Path(artifact_dir), Path(model_path)
    model = onnx.load(str(model_path), load_external_data=False)
    by_name = {vi.name: vi for vi in model.graph.input}
    specs = []
    for name in user_inputs:
        if name not in by_name:
            raise OnnxcompError(f"training input {name!r} is not a graph input of {model_path}")
        specs.append(_spec(by_name[name], model_path))
    meta = _read_meta(artifact_dir)
    label_name = meta.get("labels", "labels")
    labels = [s for s in specs if s.name == label_name] or [s for s in specs if s.dtype == np.int64]
    # The data input: float images, or int64 token ids [batch, seq] of a language model.
    images = [s for s in specs if s not in labels[:1] and s.dtype.kind in "fi"]
    if len(specs) != 2 or not labels or len(images) != 1:
        raise OnnxcompError(
            f"{model_path} takes inputs {[(s.name, s.shape, str(s.dtype)) for s in specs]}; onnxcomp's "
            "runner expects exactly one float image (or int64 token) input and one int64 label input"
        )
    image, label = images[0], labels[0]
    if image.dtype.kind == "i":
        if len(image.shape) != 2 or label.shape != (image.shape[0] * image.shape[1],):
            raise OnnxcompError(f"token input {image.name!r} {image.shape} of {model_path} needs [batch, seq] and "
                                f"labels [batch·seq]; the labels {label.name!r} have shape {label.shape}")
    elif label.shape != (image.shape[0],):
        raise OnnxcompError(
            f"labels {label.name!r} of {model_path} have shape {label.shape}; expected [batch]={image.shape[0]}"
        )
    classes = meta.get("classes") or _classes_from_graph(model.graph)
    inferred = classes is None
    return GraphData(image, label, int(classes or DEFAULT_CLASSES), inferred)


def synthetic_batches(
    input_shape: tuple[int, ...], classes: int, seed: int, dtype: np.dtype = np.dtype(np.float32)
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless seeded (image, labels) batches, different every step; labels are int64 in [0, classes)."""
    if np.dtype(dtype).kind == "i":  # token ids of a language model, next-token labels
        from .text_data import synthetic_token_batches

        yield from synthetic_token_batches(input_shape, classes, seed)
        return
    rng = np.random.default_rng(seed)
    batch = input_shape[0]
    while True:
        x = rng.standard_normal(input_shape, dtype=np.float32).astype(dtype, copy=False)
        y = rng.integers(0, classes, size=batch, dtype=np.int64)
        yield x, y


@dataclass
class Dataset:
    """A fixed train/test split already shaped for one graph: arrays of whole batches."""

    x_train: np.ndarray  # [n_train_batches, batch, C, H, W]
    y_train: np.ndarray  # [n_train_batches, batch]
    x_test: np.ndarray
    y_test: np.ndarray

    def train_batches(self, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Endless epochs over the train batches; each epoch reshuffles samples (seeded)."""
        rng = np.random.default_rng(seed)
        x = self.x_train.reshape(-1, *self.x_train.shape[2:])
        y = self.y_train.reshape(-1)
        n_batches, batch = self.y_train.shape
        while True:
            order = rng.permutation(len(y))
            for b in range(n_batches):
                idx = order[b * batch:(b + 1) * batch]
                yield np.ascontiguousarray(x[idx]), np.ascontiguousarray(y[idx])

    def test_batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for xb, yb in zip(self.x_test, self.y_test):
            yield xb, yb


def digits_dataset(input_shape: tuple[int, ...], classes: int, *, test_fraction: float = 0.25,
                   split_seed: int = 0) -> Dataset:
    """scikit-learn's bundled 8x8 digits, bilinearly resized to (C, H, W), standardized, batched.

    input_shape is the graph's full input shape [batch, C, H, W]; the remainder of each split that
    does not fill a whole batch is dropped (the graphs have a static batch).
    """
    if len(input_shape) != 4:
        raise OnnxcompError(f"digits data needs an NCHW image input; the graph's input has shape {input_shape}")
    if classes < 10:
        raise OnnxcompError(f"digits has 10 classes but the model has {classes}; use data='synthetic'")
    from sklearn.datasets import load_digits

    batch, channels, height, width = input_shape
    digits = load_digits()
    images = resize_bilinear(digits.images.astype(np.float32), height, width)[:, None]  # values 0..16
    x = np.broadcast_to(images, (images.shape[0], channels, height, width))
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(split_seed).permutation(len(y))
    n_test = int(round(len(y) * test_fraction))
    test_idx, train_idx = order[:n_test], order[n_test:]
    # Normalize with train statistics only.
    mean, std = float(x[train_idx].mean()), float(x[train_idx].std())
    x = ((x - mean) / std).astype(np.float32)

    def batched(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = (len(idx) // batch) * batch
        if n == 0:
            raise OnnxcompError(f"batch {batch} is larger than the digits split ({len(idx)} samples)")
        idx = idx[:n]
        return (np.ascontiguousarray(x[idx].reshape(-1, batch, channels, height, width)),
                y[idx].reshape(-1, batch))

    x_train, y_train = batched(train_idx)
    x_test, y_test = batched(test_idx)
    return Dataset(x_train, y_train, x_test, y_test)


def _linear_taps(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of a bilinear resize along one axis (half-pixel centres, edges clamped)."""
    scale = np.float32(size_in / size_out)
    src = np.maximum((np.arange(size_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5), 0)
    lo = np.minimum(src.astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    return lo, hi, (src - lo).astype(np.float32)


def resize_bilinear(images: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize [N, h, w] images to [N, height, width] the way torch's interpolate(mode="bilinear",
    align_corners=False) does, in NumPy: the training runtime must not import torch."""
    r0, r1, rw = _linear_taps(images.shape[1], height)
    c0, c1, cw = _linear_taps(images.shape[2], width)
    rows = images[:, r0, :] * (1 - rw)[None, :, None] + images[:, r1, :] * rw[None, :, None]
    return (rows[:, :, c0] * (1 - cw) + rows[:, :, c1] * cw).astype(np.float32)
