"""Check an output location before any work is done, so an unwritable one is a one-line error (exit 2), not a
traceback after minutes of export or analysis."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OnnxcompError


def ensure_writable(path: str | os.PathLike[str], flag: str = "-o", *, directory: bool = False) -> Path:
    """Raise OnnxcompError unless ``path`` (a file, or with ``directory`` a directory to create or fill) can be
    written: its nearest existing ancestor must be a directory we can create a file in."""
    target = Path(path)
    probe_dir = target if directory and target.is_dir() else target.parent
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise OnnxcompError(f"{flag} {target}: {probe_dir} is not a directory; choose another output path")
    try:
        with tempfile.TemporaryFile(dir=probe_dir):
            pass
    except OSError as exc:
        raise OnnxcompError(f"{flag} {target}: cannot write in {probe_dir} ({exc.strerror or exc}); choose a writable "
                            "location") from None
    return target
