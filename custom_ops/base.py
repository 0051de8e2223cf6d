"""The one interface every activation codec implements.

A codec turns an activation into a *payload* (a tuple of arrays, named by ``payload_names``) and back.
Each codec has a NumPy backend and a CuPy RawKernel backend that produce the same bytes, so a payload
made on one decodes on the other. This module imports neither onnxruntime nor torch (nor cupy at import
time): the GPU machine has only NumPy + CuPy.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

KERNEL_DIR = Path(__file__).parent / "kernels"

Payload = tuple[Any, ...]  # arrays (numpy.ndarray or cupy.ndarray), in ``payload_names`` order


def is_cupy_array(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


class Codec(ABC):
    """Encode/decode one stashed tensor.

    ``params`` are codec-specific, JSON-serialisable keyword arguments fixed when the graph is rewritten
    (e.g. MaxPool kernel/stride/pads); they are stored as node attributes in the rewritten graph.
    The original shape travels inside the payload, so ``decode`` needs only the payload and params.
    """

    name: ClassVar[str]                 # registry key, e.g. "signbits"
    lossless: ClassVar[bool] = True
    input_dtype: ClassVar[str]          # numpy dtype name of the tensor encoded, e.g. "float32"
    output_dtype: ClassVar[str]         # numpy dtype name decode returns
    payload_names: ClassVar[tuple[str, ...]]
    payload_dtypes: ClassVar[tuple[str, ...]]
    kernel_file: ClassVar[str | None] = None  # .cu file in KERNEL_DIR

    # -- public API: dispatch on the array type ---------------------------------------------------------
    def encode(self, x: Any, **params: Any) -> Payload:
        return self.encode_gpu(x, **params) if is_cupy_array(x) else self.encode_cpu(np.asarray(x), **params)

    def decode(self, payload: Payload, **params: Any) -> Any:
        if any(is_cupy_array(p) for p in payload):
            import cupy as cp

            return self.decode_gpu(tuple(cp.asarray(p) for p in payload), **params)
        return self.decode_cpu(tuple(np.asarray(p) for p in payload), **params)

    def validate_params(self, **params: Any) -> None:
        """Raise ValueError for params this codec's encode/decode would refuse.

        The graph rewrite calls it when it writes a node's params (so ``transform --eb inf`` is refused before
        any training step), and the codec's own encode runs the same checks. Default: no params to check
        (codecs without params ignore any given)."""

    @staticmethod
    def payload_nbytes(payload: Payload) -> int:
        return int(sum(int(p.nbytes) for p in payload))

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        """Payload size predicted from the shape (and, for data-dependent codecs, stats such as density)."""
        raise NotImplementedError(f"{self.name} does not predict its size")

    # -- backends ---------------------------------------------------------------------------------------
    @abstractmethod
    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload: ...

    @abstractmethod
    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray: ...

    @abstractmethod
    def encode_gpu(self, x: Any, **params: Any) -> Payload: ...

    @abstractmethod
    def decode_gpu(self, payload: Payload, **params: Any) -> Any: ...

    def kernel_source(self) -> str | None:
        return (KERNEL_DIR / self.kernel_file).read_text() if self.kernel_file else None


REGISTRY: dict[str, Codec] = {}

# Bookkeeping keys the graph rewrite adds to an op's params; the ops strip them, codecs never see them.
from .contract import CONTROL_PARAMS  # noqa: E402


def checked_params(codec: str, params: dict[str, Any], tensor: str) -> dict[str, Any]:
    """``params`` with ``tensor`` added, once the codec's ``validate_params`` accepted its part of them:
    what the rewrite writes into a node, refused at transform time if the op would refuse it at run time."""
    from onnxcomp.errors import OnnxcompError

    try:
        get_codec(codec).validate_params(**{k: v for k, v in params.items() if k not in CONTROL_PARAMS})
    except (ValueError, KeyError) as exc:
        raise OnnxcompError(f"{tensor}: codec params refused: {exc}") from None
    return {**params, "tensor": tensor}


def register(cls: type[Codec]) -> type[Codec]:
    """Class decorator: one instance per codec in ``REGISTRY`` under ``cls.name``."""
    if cls.name in REGISTRY:
        raise ValueError(f"codec {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls()
    return cls


def get_codec(name: str) -> Codec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown codec {name!r}; known: {', '.join(sorted(REGISTRY))}") from None
