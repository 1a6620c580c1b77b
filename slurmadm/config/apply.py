"""`config apply`: write the rendered files into the Slurm config directory, safely.

Under a lock (one apply at a time per directory): re-read what is installed, back up each file
that changes into `<config_dir>/slurmadm-backup/<UTC time>/`, write each through a temporary
file and rename (readers never see half a file), record one audit event per file, then run
`scontrol reconfigure` when that is enough. A partition QOS that slurmdbd does not know is refused
before anything is written (slurmctld exits on it). When a change needs daemon restarts, nothing is
restarted here: the result names the daemons, where, and in which order. Restarting slurmd on
every node is a fleet operation, and the files must reach the nodes first (configless mode
pushes them on reconfigure or slurmd start; otherwise the site's own distribution does).
A second apply with the same site changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SlurmadmError, UnreachableError, UsageError
from ..files import exclusive_lock, write_atomic
from ..proc import run
from ..site import Site
from ..store import Store
from .diff import Plan, plan

LOCK_NAME = ".slurmadm-config.lock"
BACKUP_DIR = "slurmadm-backup"


@dataclass
class ApplyResult:
    plan: Plan
    dry_run: bool
    written: list[str] = field(default_factory=list)
    backup: str | None = None
    reconfigured: bool = False
    reconfigure_error: str | None = None
    events: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def restart_steps(self, site: Site) -> list[str]:
        """The restarts still to do, in order (controllers first, then the nodes)."""
        steps = []
        restart = self.plan.restart
        if "slurmctld" in restart:
            steps.append(f"restart slurmctld on {', '.join(site.cluster.controllers)}")
        if "slurmd" in restart:
            steps.append(f"restart slurmd on {restart['slurmd'] or site.all_nodes}")
        if steps and "slurmctld" not in restart and self.plan.needs_reconfigure:
            steps.append("then run `scontrol reconfigure`")
        return steps

    def as_dict(self, site: Site) -> dict:
        return {
            **self.plan.as_dict(),
            "dry_run": self.dry_run,
            "written": self.written,
            "backup": self.backup,
            "reconfigured": self.reconfigured,
            "reconfigure_error": self.reconfigure_error,
            "restart_steps": self.restart_steps(site),
            "events": self.events,
            "warnings": self.warnings,
        }


def _sha(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def _backup_dir(target: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = target / BACKUP_DIR / stamp
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{stamp}-{n}"), n + 1
    return path


def check_partition_qos(site: Site, slurm_conf_text: str, *, timeout: float = 30.0) -> None:
    """slurmctld exits (fatal, on start and on reconfigure) when a partition's QOS is not in
    slurmdbd, and silently drops AllowQos names it does not know (only logging them): a partition
    meant for some QOS would then refuse them all, or admit every QOS. Refuse both before
    writing. Asks slurmdbd through the config about to be written."""
    wanted = [(f"partitions[{i}].qos", p.qos, "slurmctld stops on an unknown partition QOS")
              for i, p in enumerate(site.partitions) if p.qos]
    wanted += [(f"partitions[{i}].allow_qos[{j}]", q, "slurmctld would silently drop it from AllowQos")
               for i, p in enumerate(site.partitions) for j, q in enumerate(p.allow_qos)]
    if not wanted or site.slurm.accounting_storage != "slurmdbd":
        return
    with tempfile.TemporaryDirectory(prefix="slurmadm-qos-") as tmp:
        conf = Path(tmp) / "slurm.conf"
        conf.write_text(slurm_conf_text)
        try:
            out = run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], timeout=timeout,
                      env={"SLURM_CONF": str(conf)}).stdout
        except SlurmadmError as exc:
            raise UnreachableError(f"cannot check the partition QOS in slurmdbd, nothing written: {exc}") from None
    known = set(out.split())
    missing = [(key, q, why) for key, q, why in wanted if q not in known]
    if missing:
        key, q, why = missing[0]
        more = f" ({len(missing) - 1} more QOS missing)" if len(missing) > 1 else ""
        raise UsageError(
            f"{key}: QOS {q!r} does not exist in slurmdbd, and {why}; create it first (slurmadm accounts "
            f"apply), then apply again{more}. Nothing written."
        )


def program_warnings(site: Site) -> list[str]:
    """Programs slurmctld runs on this (controller) host that are not there: Slurm only logs it
    when it tries (MailProg: "error: Failed to exec /bin/mail" at every job's mail)."""
    prog = site.slurm.mail_prog
    if prog and not os.access(prog, os.X_OK):
        return [f"slurm.mail_prog: {prog} is not an executable program on this host, so slurmctld cannot "
                f"send job mail (install a mailer such as bsd-mailx, or set mail_prog = \"\")"]
    return []


def apply(site: Site, rendered: dict[str, str], *, reason: str, dry_run: bool = False,
          target: str | Path | None = None, reconfigure: bool = True, timeout: float = 60.0) -> ApplyResult:
    target = Path(target or site.slurm.config_dir)
    if dry_run:
        result = ApplyResult(plan(rendered, target), dry_run=True)
        result.warnings = program_warnings(site)
        return result
    busy = f"another `slurmadm config apply` is writing {target}; try again when it is done"
    with exclusive_lock(target / LOCK_NAME, lambda _holder: busy):
        the_plan = plan(rendered, target)  # re-read under the lock
        result = ApplyResult(the_plan, dry_run=False, warnings=program_warnings(site))
        if not the_plan.files:
            return result
        if the_plan.needs_reconfigure or the_plan.restart:
            check_partition_qos(site, rendered["slurm.conf"], timeout=timeout)
        backup = _backup_dir(target)
        olds = [f for f in the_plan.files if f.old is not None]
        if olds:
            backup.mkdir(parents=True)
            for f in olds:
                shutil.copy2(target / f.name, backup / f.name)
            result.backup = str(backup)
        with Store.for_site(site) as store:
            for f in the_plan.files:
                write_atomic(target / f.name, f.new)
                result.written.append(f.name)
                result.events.append(store.audit(
                    "config.apply", str(target / f.name), reason,
                    sha256_before=_sha(f.old), sha256_after=_sha(f.new),
                    backup=str(backup / f.name) if f.old is not None else None,
                    site_digest=site.digest,
                    changes=[{"what": c.what, "action": c.action, "daemons": list(c.daemons)}
                             for c in f.changes],
                ))
        if reconfigure and the_plan.needs_reconfigure and not the_plan.restart:
            try:
                run(["scontrol", "reconfigure"], timeout=timeout,
                    env={"SLURM_CONF": str(target / "slurm.conf")})
                result.reconfigured = True
            except SlurmadmError as exc:
                result.reconfigure_error = str(exc)
        return result
