"""`slurmadm bmc recover install-sweep`: `slurmadm bmc recover --sweep` every few minutes, as a
systemd service + timer (default) or a cron.d entry, next to Slurm's trigger
(`install-trigger`): the trigger reacts when a node goes DOWN, the sweep catches what a trigger
missed (slurmctld restarted, a trigger's run failed, the grace period still running then).

The files are written through slurmadm.units (plan, --dry-run, one audit event per written
file, a second run is a no-op). Nothing reaches them unchecked: the interval is parsed here and
the paths must be plain words (`units.plain_word`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import UsageError
from ..site import Site
from ..units import CRON_DIR, SYSTEMD_DIR, PlannedFile, plain_word, slurmadm_command

UNIT = "slurmadm-bmc-recover"
MIN_INTERVAL_S = 60
MAX_INTERVAL_S = 86400
_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_interval(text: str) -> int:
    """'5m', '90s', '1h' or plain minutes ('10') -> seconds, 1 minute to 1 day."""
    m = re.fullmatch(r"\s*(\d{1,6})\s*([smh]?)\s*", text or "")
    if not m:
        raise UsageError(f"--interval: {text!r} is not a duration (5m, 90s, 1h)")
    seconds = int(m.group(1)) * _UNITS[m.group(2) or "m"]
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:
        raise UsageError(f"--interval: {text!r} is outside 1 minute to 1 day")
    return seconds


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


def _duration(seconds: int) -> str:
    return f"{seconds // 60}min" if seconds % 60 == 0 else f"{seconds}s"


def plan(site: Site, site_file: str, *, kind: str, interval_s: int, dest: str | None = None,
         log: str = "/var/log/slurmadm-bmc-recover.log") -> list[PlannedFile]:
    site_abs = plain_word(str(Path(site_file).resolve()), "--site")
    command = [plain_word(w, "slurmadm's path") for w in slurmadm_command()]
    command += ["bmc", "recover", "--sweep", "--site", site_abs, "--reason", '"bmc recover sweep"']
    environment = {k: plain_word(os.environ[k], k) for k in ("SLURM_CONF",) if os.environ.get(k)}
    head = "# slurmadm BMC recovery sweep (written by `slurmadm bmc recover install-sweep`; run it again instead of editing)"
    if kind == "cron":
        log = plain_word(os.path.abspath(log), "--log")
        lines = [head, "SHELL=/bin/sh", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                 *(f"{k}={v}" for k, v in environment.items()),
                 f"{cron_schedule(interval_s)} root {' '.join(command)} >> {log} 2>&1"]
        return [PlannedFile(Path(dest or CRON_DIR) / UNIT, "\n".join(lines) + "\n")]
    if kind != "systemd":
        raise UsageError(f"kind {kind!r}: cron or systemd")
    # systemd stops a run that outlives a whole recovery (boot timeout) by 10 minutes
    timeout = int(site.bmc.recover.boot_timeout_s) + 600
    service = [head.replace("; run", f"; started by {UNIT}.timer; run"),
               "[Unit]",
               "Description=slurmadm BMC recovery sweep: power-cycle nodes Slurm has had DOWN too long",
               "Wants=network-online.target",
               "After=network-online.target",
               "",
               "[Service]",
               "Type=oneshot",
               *(f"Environment={k}={v}" for k, v in environment.items()),
               f"ExecStart={' '.join(command)}",
               f"TimeoutStartSec={timeout}",
               # exit 1 (a node not recovered) and 3 (a BMC unreachable) leave the unit failed:
               # OnFailure= hooks can alert on it
               ]
    timer = [head,
             "[Unit]",
             f"Description=slurmadm BMC recovery sweep every {_duration(interval_s)}",
             "",
             "[Timer]",
             f"OnBootSec={_duration(interval_s)}",
             f"OnUnitActiveSec={_duration(interval_s)}",
             "AccuracySec=10s",
             "",
             "[Install]",
             "WantedBy=timers.target"]
    root = Path(dest or SYSTEMD_DIR)
    return [PlannedFile(root / f"{UNIT}.service", "\n".join(service) + "\n"),
            PlannedFile(root / f"{UNIT}.timer", "\n".join(timer) + "\n")]
