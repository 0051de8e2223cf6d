"""Character-level text for the GPT-tiny LM: the Python standard library's own source files.

Real text that ships with every Python installation, so nothing is downloaded. The corpus is the
top-level ``*.py`` files of ``sysconfig``'s stdlib directory in sorted order, read up to a byte budget;
characters map onto a fixed 96-symbol vocabulary (newline + printable ASCII; anything else becomes a
space), so every Python version gives the same token ids for the same characters. The last tenth of the
corpus is the validation split.
"""
from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onnxcomp.errors import OnnxcompError

VOCAB_SIZE = 96  # "\n" → 0, chr(32..126) → 1..95
DEFAULT_CORPUS_BYTES = 4 << 20


def encode_text(text: str) -> np.ndarray:
    """Token ids (uint8) of ``text`` in the fixed vocabulary."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    ids = codes - 31
    ids[codes == 10] = 0
    ids[((codes < 32) & (codes != 10)) | (codes > 126)] = 1  # space
    return ids.astype(np.uint8)


def decode_tokens(ids: np.ndarray) -> str:
    ids = np.asarray(ids, dtype=np.int64)
    return "".join("\n" if i == 0 else chr(int(i) + 31) for i in ids)


def stdlib_corpus(max_bytes: int = DEFAULT_CORPUS_BYTES) -> np.ndarray:
    """Token ids of the standard library's top-level source files, sorted by name, up to ``max_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    if not files:
        raise OnnxcompError(f"no Python source files under {root}; this installation has no stdlib sources "
                            "to train the character LM on (use data='synthetic')")
    parts, total = [], 0
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        parts.append(text[: max_bytes - total])
        total += len(parts[-1])
        if total >= max_bytes:
            break
    return encode_text("".join(parts))


@dataclass
class TextDataset:
    """Next-character batches: tokens [batch, seq] (int64) and flat labels [batch·seq] (int64)."""

    train: np.ndarray
    val: np.ndarray
    batch: int
    seq: int

    def _windows(self, data: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = starts[:, None] + np.arange(self.seq + 1)[None, :]
        w = data[idx].astype(np.int64)
        return np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:].reshape(-1))

    def train_batches(self, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Endless batches of windows at seeded random offsets of the train split."""
        rng = np.random.default_rng(seed)
        while True:
            yield self._windows(self.train, rng.integers(0, len(self.train) - self.seq - 1, size=self.batch))

    def test_batches(self, max_batches: int = 8) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Evenly spaced, non-overlapping windows of the validation split (the same every call)."""
        n = min(max_batches, (len(self.val) - 1) // (self.batch * self.seq))
        for b in range(n):
            starts = (b * self.batch + np.arange(self.batch)) * self.seq
            yield self._windows(self.val, starts)


def text_dataset(tokens_shape: tuple[int, ...], vocab: int, *, max_bytes: int = DEFAULT_CORPUS_BYTES,
                 val_fraction: float = 0.1) -> TextDataset:
    """The stdlib corpus cut for a graph whose token input has shape [batch, seq]."""
    if len(tokens_shape) != 2:
        raise OnnxcompError(f"text data needs a [batch, seq] token input; the graph's input has shape {tokens_shape}")
    if vocab < VOCAB_SIZE:
        raise OnnxcompError(f"the character vocabulary has {VOCAB_SIZE} symbols but the model has {vocab} "
                            "outputs; build the LM with at least that many")
    batch, seq = tokens_shape
    ids = stdlib_corpus(max_bytes)
    cut = int(len(ids) * (1 - val_fraction))
    if cut < seq + 2 or len(ids) - cut < batch * seq + 1:
        raise OnnxcompError(f"stdlib corpus of {len(ids)} characters is too short for batch {batch} × seq {seq}; "
                            "use a shorter sequence or a larger max_bytes")
    return TextDataset(ids[:cut], ids[cut:], batch, seq)


def synthetic_token_batches(tokens_shape: tuple[int, ...], vocab: int,
                            seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless seeded random token batches with next-token labels [batch·seq]."""
    rng = np.random.default_rng(seed)
    while True:
        x = rng.integers(0, vocab, size=tokens_shape, dtype=np.int64)
        yield x, np.ascontiguousarray(np.roll(x, -1, axis=1).reshape(-1))
