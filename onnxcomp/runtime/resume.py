"""`onnxcomp train --save DIR`: the trained state (parameters and optimizer moments), how far training got,
and the adaptive error bounds, so a later run with the same --save continues where this one stopped."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from onnxcomp.errors import OnnxcompError

PROGRESS = "progress.json"


def load_progress(save_dir: str | os.PathLike[str] | None, model_path: Path) -> dict[str, Any] | None:
    """The saved progress in ``save_dir`` (None when there is none yet). A save made for another training
    graph is refused: its checkpoint may not hold that graph's parameters."""
    if save_dir is None:
        return None
    d = Path(save_dir)
    if d.exists() and not d.is_dir():
        raise OnnxcompError(f"--save {d}: exists and is not a directory")
    path = d / PROGRESS
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise OnnxcompError(f"{path}: unreadable ({exc}); delete {d} to start over") from None
    if info.get("model") != model_path.name:
        raise OnnxcompError(f"--save {d} holds a run of {info.get('model')}, not {model_path.name}; use another "
                            "directory for this graph")
    if not (d / "checkpoint").exists():
        raise OnnxcompError(f"--save {d}: {PROGRESS} without a checkpoint; delete {d} to start over")
    return info | {"checkpoint": str(d / "checkpoint")}


def save_progress(save_dir: str | os.PathLike[str], state: Any, *, step: int, model_path: Path, seed: int,
                  data: str, bounds: dict[str, float]) -> Path:
    """Write checkpoint (with optimizer state) and progress atomically: a crash mid-save keeps the old pair."""
    d = Path(save_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        info = {"step": step, "model": model_path.name, "seed": seed, "data": data, "bounds": bounds}
        save_training_state(d, state, PROGRESS, json.dumps(info, indent=2) + "\n")
    except OSError as exc:
        raise OnnxcompError(f"--save {d}: cannot write ({exc.strerror or exc}); choose a writable directory") from None
    return d


def save_training_state(directory: Path, state: Any, info_name: str, info_text: str) -> None:
    """The checkpoint (parameters and optimizer state) and its progress file ``info_name`` in ``directory``,
    each written beside its final name and renamed into place (used by `train --save` and Trainer.save)."""
    from onnxruntime.training.api import CheckpointState

    tmp = directory / ".checkpoint.tmp"
    CheckpointState.save_checkpoint(state, str(tmp), include_optimizer_state=True)
    (directory / f".{info_name}.tmp").write_text(info_text)
    os.replace(tmp, directory / "checkpoint")
    os.replace(directory / f".{info_name}.tmp", directory / info_name)
