"""Files slurmadm writes: `write_atomic` replaces a file in one step (readers see the old text or
the new, never half of it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import UsageError


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
