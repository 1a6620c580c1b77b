"""Files slurmadm writes and the lock files it holds.

`write_atomic` replaces a file in one step (readers see the old text or the new, never half of
it); `exclusive_lock` keeps a second run of the same operation from starting while one is busy.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import LockBusy, UsageError


def write_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write through a temporary file in the same directory (fsynced), then rename it over
    `path`. An existing file keeps its mode and owner; a new one gets `mode`."""
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".slurmadm-tmp")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), st.st_mode & 0o7777 if st else mode)
            if st is not None and os.geteuid() == 0:
                os.fchown(fh.fileno(), st.st_uid, st.st_gid)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def exclusive_lock(path: Path, busy: Callable[[str], str]) -> Iterator[None]:
    """Hold an flock on `path` for the block; when another process holds it, raise
    LockBusy(busy(holder)) at once, `holder` being what the lock file says about it ("pid N on
    HOST since TIME"). The kernel releases the lock when its process dies: a crash never leaves
    it stuck."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise UsageError(f"{path}: cannot lock ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise LockBusy(busy(holder)) from None
        since = dt.datetime.now().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
