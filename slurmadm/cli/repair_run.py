"""`slurmadm repair run`: advance each incident by one step (slurmadm/repair/run.py). The group
itself lives in cli/repair.py, which adds this command."""

from __future__ import annotations

import sys

import click

from .common import (
    console,
    dry_run_option,
    get_site,
    info,
    json_option,
    print_json,
    reason_option,
    site_option,
    table,
)


def _rows(report) -> list[list[str]]:
    done = {(d["node"], d.get("incident", "")): d for d in report.done}
    rows = []
    for a in report.actions:
        d = done.get((a.node, a.incident))
        result = "" if d is None else ("ok" if d.get("ok") else "held" if d.get("ok") is None else "failed")
        rows.append([a.node, a.incident, a.cls, a.state, a.do, result, d["detail"] if d else a.why])
    return rows


@click.command("run")
@site_option
@json_option
@dry_run_option
@reason_option("slurmadm repair run")
def run(site_file, as_json, dry_run, reason) -> None:
    """Advance each incident by one step: GPU reset, reboot (BMC power cycle when it does not come
    back), qualification job, resume; RMA and lemons stay drained. Each step is planned first,
    audited, and held under the [repair] breaker. Exit 1 when a step failed, 3 when Slurm or a
    node is unreachable (nothing changed)."""
    from ..repair import run as rr
    from ..repair.qualify import Qualifier
    from ..slurm import get_backend
    from ..store import Store

    site = get_site(site_file)
    backend = get_backend()

    def remote():
        from ..fleet.ssh import ParamikoRemote

        return ParamikoRemote(site.fleet)

    with Store.for_site(site) as store:
        progress = (lambda m: None) if as_json else info
        ex = rr.Executor(site, backend, store, remote_factory=remote,
                         qualifier=Qualifier(site, backend, store, site_file=site_file, progress=progress),
                         power_cycle=rr.bmc_power_cycle(site), progress=progress, reason=reason)
        report = ex.run(dry_run=dry_run)
        if not dry_run:  # RMA cases follow the run: swaps seen, qualifications passed (repair/rma.py)
            from ..repair import rma

            rma.sync(store)
    if as_json:
        print_json(report.to_json())
    else:
        if not report.actions:
            console.print("repair: no open incidents")
        else:
            console.print(table("repair run" + (" (dry run: nothing changed)" if dry_run else ""),
                                ["node", "incident", "class", "state", "step", "result", "why"], _rows(report)))
    sys.exit(report.exit_code)
