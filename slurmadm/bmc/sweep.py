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
from ..units import PlannedFile, periodic, plain_word, slurmadm_command

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


def plan(site: Site, site_file: str, *, kind: str, interval_s: int, dest: str | None = None,
         log: str = "/var/log/slurmadm-bmc-recover.log") -> list[PlannedFile]:
    site_abs = plain_word(str(Path(site_file).resolve()), "--site")
    command = [plain_word(w, "slurmadm's path") for w in slurmadm_command()]
    command += ["bmc", "recover", "--sweep", "--site", site_abs, "--reason", '"bmc recover sweep"']
    environment = {k: plain_word(os.environ[k], k) for k in ("SLURM_CONF",) if os.environ.get(k)}
    head = "# slurmadm BMC recovery sweep (written by `slurmadm bmc recover install-sweep`; run it again instead of editing)"
    # systemd stops a run that outlives a whole recovery (boot timeout) by 10 minutes; exit 1 (a
    # node not recovered) and 3 (a BMC unreachable) leave the unit failed: OnFailure= can alert
    return periodic(unit=UNIT, head=head, kind=kind, command=command, environment=environment,
                    interval_s=interval_s, timeout_s=int(site.bmc.recover.boot_timeout_s) + 600, dest=dest, log=log,
                    service_description="slurmadm BMC recovery sweep: power-cycle nodes Slurm has had DOWN too long",
                    timer_description="slurmadm BMC recovery sweep")
