"""`slurmadm repair install-timer`: `slurmadm repair run` every `[repair].interval_s`, as a
systemd service + timer (default) or a cron.d entry, through slurmadm.units (plan, --dry-run,
one audit event per written file, a second run is a no-op)."""

from __future__ import annotations

import os
from pathlib import Path

from ..units import PlannedFile, periodic, plain_word, slurmadm_command

UNIT = "slurmadm-repair"


def plan(site, site_file: str, *, kind: str, interval_s: int | None = None, dest: str | None = None,
         log: str = "/var/log/slurmadm-repair.log") -> list[PlannedFile]:
    interval_s = interval_s or site.repair.interval_s
    site_abs = plain_word(str(Path(site_file).resolve()), "--site")
    command = [plain_word(w, "slurmadm's path") for w in slurmadm_command()]
    command += ["repair", "run", "--site", site_abs, "--reason", '"repair timer"']
    environment = {k: plain_word(os.environ[k], k) for k in ("SLURM_CONF",) if os.environ.get(k)}
    head = "# slurmadm repair (written by `slurmadm repair install-timer`; run it again instead of editing)"
    return periodic(unit=UNIT, head=head, kind=kind, command=command, environment=environment,
                    interval_s=interval_s, timeout_s=max(interval_s * 2, 600), dest=dest, log=log,
                    service_description="slurmadm repair: advance each hardware incident by one step",
                    timer_description="slurmadm repair")
