"""Files slurmadm installs for systemd and cron: services, timers, drop-ins, cron.d entries.

One path for every `install-*` command (`config slurmd-unit`, `burnin install-schedule`,
`exporter install`, `bmc recover install-sweep`): the capability plans `PlannedFile`s, the CLI
shows them under --dry-run (`cli.common.install_files`), and `install()` writes only what
changed (temp file + rename) with one audit event per written file, so a second run is a no-op.
"""

from __future__ import annotations

import os
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


def duration(seconds: int) -> str:
    """systemd's time span: whole minutes as `5min`, else seconds."""
    return f"{seconds // 60}min" if seconds % 60 == 0 else f"{seconds}s"


def cron_schedule(interval_s: int) -> str:
    """The cron times for an interval cron can keep evenly: minutes dividing 60, hours dividing 24."""
    if interval_s % 60 == 0 and interval_s < 3600 and 60 % (interval_s // 60) == 0:
        minutes = interval_s // 60
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if interval_s % 3600 == 0 and 24 % (interval_s // 3600) == 0:
        hours = interval_s // 3600
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    raise UsageError(f"--interval: cron cannot run every {interval_s} s evenly (minutes dividing 60 or hours "
                     "dividing 24); use a systemd timer (--systemd)")


def periodic(*, unit: str, head: str, kind: str, command: list[str], environment: dict[str, str],
             interval_s: int, service_description: str, timer_description: str, timeout_s: int,
             dest: str | None, log: str) -> list[PlannedFile]:
    """A slurmadm command run every `interval_s`: a cron.d entry (`kind` cron, output appended to
    `log`) or a systemd oneshot service + timer (`kind` systemd, stopped after `timeout_s`)."""
    if kind == "cron":
        log = plain_word(os.path.abspath(log), "--log")
        lines = [head, "SHELL=/bin/sh", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                 *(f"{k}={v}" for k, v in environment.items()),
                 f"{cron_schedule(interval_s)} root {' '.join(command)} >> {log} 2>&1"]
        return [PlannedFile(Path(dest or CRON_DIR) / unit, "\n".join(lines) + "\n")]
    if kind != "systemd":
        raise UsageError(f"kind {kind!r}: cron or systemd")
    service = [head.replace("; run", f"; started by {unit}.timer; run"),
               "[Unit]",
               f"Description={service_description}",
               "Wants=network-online.target",
               "After=network-online.target",
               "",
               "[Service]",
               "Type=oneshot",
               *(f"Environment={k}={v}" for k, v in environment.items()),
               f"ExecStart={' '.join(command)}",
               f"TimeoutStartSec={timeout_s}"]
    timer = [head,
             "[Unit]",
             f"Description={timer_description} every {duration(interval_s)}",
             "",
             "[Timer]",
             f"OnBootSec={duration(interval_s)}",
             f"OnUnitActiveSec={duration(interval_s)}",
             "AccuracySec=10s",
             "",
             "[Install]",
             "WantedBy=timers.target"]
    root = Path(dest or SYSTEMD_DIR)
    return [PlannedFile(root / f"{unit}.service", "\n".join(service) + "\n"),
            PlannedFile(root / f"{unit}.timer", "\n".join(timer) + "\n")]


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
