"""Files slurmadm installs for systemd and cron: services, timers, drop-ins, cron.d entries.

One path for every `install-*` command (`config slurmd-unit`, `burnin install-schedule`,
`exporter install`, `bmc recover install-sweep`): the capability plans `PlannedFile`s, the CLI
shows them under --dry-run (`cli.common.install_files`), and `install()` writes only what
changed (temp file + rename) with one audit event per written file, so a second run is a no-op.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .files import write_atomic

if TYPE_CHECKING:
    from .store import Store

SYSTEMD_DIR = "/etc/systemd/system"
CRON_DIR = "/etc/cron.d"

# What may stand unquoted in an ExecStart= line or a cron command: no spaces, quotes, `%`
# (systemd specifiers), `$`, `;` or other shell syntax.
_PLAIN = re.compile(r"^[A-Za-z0-9_./@+,:=\-]+$")


@dataclass(frozen=True)
class PlannedFile:
    path: Path
    text: str

    def status(self) -> str:
        try:
            return "unchanged" if self.path.read_text() == self.text else "changed"
        except FileNotFoundError:
            return "new"


def slurmadm_command() -> list[str]:
    """This installation's slurmadm: the console script next to the running Python."""
    script = Path(sys.executable).parent / "slurmadm"
    return [str(script)] if script.exists() else [sys.executable, "-m", "slurmadm"]


def plain_word(value: str, what: str) -> str:
    """`value` unchanged when it can stand as one word in a unit or cron line, else a UsageError
    naming `what` (a path with a space or a `%` would split or expand there)."""
    if not _PLAIN.fullmatch(value):
        raise UsageError(f"{what}: {value!r} cannot go into a systemd unit or cron line "
                         "(only letters, digits and _ . / @ + , : = -)")
    return value


def install(files: list[PlannedFile], store: "Store", *, action: str, reason: str,
            **detail: Any) -> list[tuple[Path, str]]:
    """Write what changed (temp file + rename, a new file 0644) and record one audit event
    (`action`) per written file. Returns (path, new|changed|unchanged) for each file."""
    done = []
    for f in files:
        status = f.status()
        if status != "unchanged":
            try:
                f.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"{f.path.parent}: cannot create ({exc.strerror})") from None
            write_atomic(f.path, f.text)
            store.audit(action, str(f.path), reason, status=status, **detail)
        done.append((f.path, status))
    return done
