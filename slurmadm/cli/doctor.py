"""`slurmadm doctor`: what slurmadm will use here and whether it works (see slurmadm/doctor/)."""

from __future__ import annotations

import click

from .. import doctor as doc
from .common import console, json_option, print_json, say, site_option

STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


@click.command("doctor")
@site_option
@click.option("--node", metavar="NAME", default=None,
              help="Check NVML as this node (default: $SLURMD_NODENAME, then the host name).")
@click.option("--check", "only", multiple=True, metavar="ID",
              help="Only this check (repeatable): site, slurm, slurmctld, slurmdbd, nvml, store, hooks, schedule, "
                   "bmc, ssh, and those other capabilities add.")
@json_option
def doctor(site_file, node, only, as_json) -> None:
    """What slurmadm uses here, and whether it works.

    Say what slurmadm will use here and whether it works: the site file and its hash, Slurm's
    release and backend, slurmctld and slurmdbd, NVML, the store, the hooks in slurm.conf, the
    burn-in schedule, BMC and SSH reachability. One line per check (ok/warn/fail) with the fix.
    Changes nothing. Exit 1 when any check fails."""
    ctx = doc.Context(site_file=site_file, node=node)
    findings = doc.run(ctx, list(only) or None)
    code = doc.exit_code(findings)
    if as_json:
        print_json({"ok": code == 0, "findings": [f.to_json() for f in findings]})
    else:
        width = max(len(f.check) for f in findings)
        for f in findings:  # a list, not a table: long lines stay whole when piped or in 80 columns
            say((f"{f.status:<4}", STYLE.get(f.status, "")), f"  {f.check:<{width}}  {f.summary}")
            if f.fix and f.status in ("warn", "fail"):
                say(" " * (width + 8), ("fix: ", "bold"), f.fix)
        counts = {s: sum(1 for f in findings if f.status == s) for s in doc.STATUSES}
        console.print(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    raise SystemExit(code)
