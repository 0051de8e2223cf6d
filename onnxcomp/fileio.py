"""Outputs written atomically, one file or a whole set, never replacing what the user did not allow.

* ``atomic_output(path)``: a temp file beside ``path`` renamed onto it when the block succeeds (with
  ``replace=False`` it is hard-linked into place instead, which fails if ``path`` appeared meanwhile).
* ``output_lock(path)``: an exclusive ``flock`` on ``.NAME.lock`` beside ``path`` for the whole run, so two
  runs writing the same output cannot interleave; the loser is told at once. Holding it, the run removes
  what killed runs left behind (``.NAME.*.tmp`` files, ``.NAME.tmp-*``/``.NAME.old-*`` directories).
* ``held_flock(path)``: a blocking ``flock`` on ``path`` around a block (benchmarks on a shared machine take
  turns on one lock file so their timings do not overlap); ``None`` holds nothing.
* ``staged_directory(path)``: a sibling temp directory to write a multi-file output into, swapped in with one
  ``renameat2(RENAME_EXCHANGE)`` (Linux), so ``path`` is always the complete old set or the complete new one.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import OnnxcompError, OutputExistsError

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_problem(directory: Path) -> str | None:
    """Why no file can be created in ``directory`` (None: it can). A real probe: access() says yes to root on
    read-only directories, not on read-only mounts."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return None
    except OSError as exc:
        return str(exc.strerror or exc)


def ensure_writable(path: str | os.PathLike[str], flag: str = "-o", *, directory: bool = False) -> Path:
    """Raise OnnxcompError unless ``path`` (a file, or with ``directory`` a directory to create or fill) can be
    written: its nearest existing ancestor must be a directory we can create a file in. For outputs written
    later, after long work (export, analysis): the check comes first, the error names the flag."""
    target = Path(path)
    probe_dir = target if directory and target.is_dir() else target.parent
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise OnnxcompError(f"{flag} {target}: {probe_dir} is not a directory; choose another output path")
    problem = _write_problem(probe_dir)
    if problem:
        raise OnnxcompError(f"{flag} {target}: cannot write in {probe_dir} ({problem}); choose a writable location")
    return target


def check_output_path(path: str | os.PathLike[str], *, directory: bool = False, replace: bool = False,
                      how: str = "pass force=True") -> Path:
    """Refuse an output that cannot be written, before any work is done: its parent missing, not a directory
    or not writable; the output itself of the wrong kind, or existing when ``replace`` is False."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if directory and not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)  # a new output directory may be nested
        except OSError as exc:
            raise OnnxcompError(f"{target}: cannot create {parent} ({exc.strerror}); choose another output path") \
                from None
    if not parent.exists():
        raise OnnxcompError(f"{parent}: output directory does not exist; create it first")
    if not parent.is_dir():
        raise OnnxcompError(f"{target}: {parent} is a file, not a directory; choose another output path")
    problem = _write_problem(parent)
    if problem:
        raise OnnxcompError(f"{target}: cannot write in {parent} ({problem}); choose another output path")
    if target.exists():
        if directory and not target.is_dir():
            raise OnnxcompError(f"{target} exists and is not a directory; choose another output path")
        if not directory and target.is_dir():
            raise OnnxcompError(f"{target} is a directory; give a file name")
        if not replace and not (directory and not any(target.iterdir())):
            raise OutputExistsError(target, how=how)
        if target.is_dir() and not os.access(target, os.W_OK | os.X_OK):
            raise OnnxcompError(f"{target}: directory is not writable; choose another output path")
    return target


@contextmanager
def atomic_output(path: str | os.PathLike[str], *, replace: bool = True) -> Iterator[str]:
    """A temporary file name beside ``path``: moved onto ``path`` when the block succeeds, removed when it
    raises. The file gets the mode a plain ``open`` would give (0666 less the umask), not mkstemp's 0600.
    ``replace=False``: never replace an existing ``path`` (exclusive create: OutputExistsError instead)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield tmp
        if replace:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)  # atomic and exclusive: fails if target exists
            except FileExistsError:
                raise OutputExistsError(target, "appeared while this run was writing it",
                                        how="pass force=True") from None
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _stale_entries(target: Path) -> list[Path]:
    parent = target.parent if str(target.parent) else Path(".")
    name = target.name
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    out = []
    for e in entries:
        n = e.name
        if n.startswith(f".{name}.") and (n.endswith(".tmp") or n.startswith(f".{name}.tmp-")
                                           or n.startswith(f".{name}.old-")):
            out.append(e)
    return out


def clean_stale(path: str | os.PathLike[str]) -> list[Path]:
    """Remove what killed runs writing ``path`` left beside it; call only while holding ``output_lock(path)``
    (so nothing found belongs to a live run). A ``.NAME.old-*`` directory with ``path`` itself missing is a
    set retired by a run killed mid-swap (non-Linux fallback): it is put back, not deleted."""
    target = Path(path)
    removed = []
    for e in sorted(_stale_entries(target)):
        if e.name.startswith(f".{target.name}.old-") and not os.path.lexists(target):
            os.rename(e, target)
            continue
        if e.is_dir() and not e.is_symlink():
            shutil.rmtree(e, ignore_errors=True)
        else:
            e.unlink(missing_ok=True)
        removed.append(e)
    return removed


class OutputLock:
    """An exclusive lock for writing ``path`` (``flock`` on ``.NAME.lock`` beside it), held for a whole run.

    ``acquire()`` fails at once with OutputExistsError if another process holds it, then removes what killed
    runs left beside ``path`` (``clean_stale``). The lock file is removed on release. Also a context manager."""

    def __init__(self, path: str | os.PathLike[str], *, how: str = "wait for it to finish") -> None:
        self.target = Path(path)
        self.lock_path = self.target.parent / f".{self.target.name}.lock"
        self.how = how
        self._fd: int | None = None

    def acquire(self) -> "OutputLock":
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                finally:
                    os.close(fd)
                raise OutputExistsError(self.target, "is being written by another onnxcomp run"
                                        f"{f' (pid {holder})' if holder else ''}", how=self.how) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file its last holder unlinked after we opened it
                break
            os.close(fd)
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            clean_stale(self.target)
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.lock_path)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def output_lock(path: str | os.PathLike[str], *, how: str = "wait for it to finish") -> OutputLock:
    """``with output_lock(path):`` -- see OutputLock."""
    return OutputLock(path, how=how)


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(2); False where the C library or file system lacks it (the caller falls back)."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), ctypes.c_uint(flags)) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def carry_over_entries(old: Path, new: Path) -> None:
    """Hard-link the entries of ``old`` that the new set does not have into ``new`` (``old`` is about to be
    deleted, so nothing is shared afterwards; a set checked before it is published — `transform --verify` — is
    completed the same way first, so that what is measured is what will be published)."""
    for e in old.iterdir():
        dst = new / e.name
        if os.path.lexists(dst) or e.name.startswith(".") and e.name.endswith((".tmp", ".lock")):
            continue
        if e.is_dir() and not e.is_symlink():
            shutil.copytree(e, dst, symlinks=True, copy_function=os.link)
        elif e.is_symlink():
            os.symlink(os.readlink(e), dst)
        else:
            os.link(e, dst)


def publish_directory(stage: Path, target: Path, *, replace: bool, carry_over: bool = False) -> None:
    """Put the complete directory ``stage`` at ``target`` atomically (see ``staged_directory``)."""
    if not os.path.lexists(target) or (target.is_dir() and not any(target.iterdir())):
        if os.path.lexists(target):
            target.rmdir()
        if not _renameat2(stage, target, _RENAME_NOREPLACE):
            if os.path.lexists(target):
                raise OutputExistsError(target, "appeared while this run was writing it")
            os.rename(stage, target)
        return
    if not replace:
        raise OutputExistsError(target)
    if carry_over:
        carry_over_entries(target, stage)
    if _renameat2(stage, target, _RENAME_EXCHANGE):
        shutil.rmtree(stage, ignore_errors=True)  # now the old set; a kill here leaves it for clean_stale
        return
    # No atomic exchange: two renames; clean_stale() restores a set retired by a run killed in between.
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    retired.rmdir()
    os.rename(target, retired)
    try:
        os.rename(stage, target)
    except OSError:
        os.rename(retired, target)
        raise
    shutil.rmtree(retired, ignore_errors=True)


@contextmanager
def staged_directory(path: str | os.PathLike[str], *, replace: bool = False, carry_over: bool = False
                     ) -> Iterator[Path]:
    """A new, empty directory beside ``path`` for the complete output set; when the block succeeds it takes
    ``path``'s place in one atomic step (an existing non-empty ``path`` only with ``replace``), when it raises
    it is removed. ``carry_over``: entries of the old ``path`` the new set lacks are kept (hard links).
    Hold ``output_lock(path)`` around it so concurrent runs and leftovers of killed ones are handled."""
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes it 0700; the published directory should look ordinary
        yield stage
        publish_directory(stage, target, replace=replace, carry_over=carry_over)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


@contextmanager
def held_flock(path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing, never removed: other processes wait on it)
    for the block, waiting for it as long as it takes; ``path=None`` holds nothing."""
    if path is None:
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
