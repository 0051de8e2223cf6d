"""Atomic output files: a failed write never leaves a truncated file where the user's output should be."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary file name beside ``path``: renamed onto ``path`` when the block succeeds, removed when it
    raises. The file gets the mode a plain ``open`` would give (0666 less the umask), not mkstemp's 0600."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
