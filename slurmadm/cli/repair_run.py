"""`slurmadm repair run`: advance each incident by one step (slurmadm/repair/run.py), and
`slurmadm repair qualify NODE...`: the qualification gate on an admin's word (repair/gate.py).
The group itself lives in cli/repair.py, which adds these commands."""

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


def _executor(site, site_file, store, backend, progress, reason):
    from ..repair import run as rr
    from ..repair.qualify import Qualifier

    def remote():
        from ..fleet.ssh import ParamikoRemote

        return ParamikoRemote(site.fleet)

    return rr.Executor(site, backend, store, remote_factory=remote,
                       qualifier=Qualifier(site, backend, store, site_file=site_file, progress=progress),
                       power_cycle=rr.bmc_power_cycle(site), progress=progress, reason=reason)


def _print(report, title: str, as_json: bool, empty: str) -> None:
    if as_json:
        print_json(report.to_json())
    elif not report.actions:
        console.print(empty)
    else:
        console.print(table(title + (" (dry run: nothing changed)" if report.dry_run else ""),
                            ["node", "incident", "class", "state", "step", "result", "why"], _rows(report)))


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
    from ..slurm import get_backend
    from ..store import Store

    site = get_site(site_file)
    backend = get_backend()
    with Store.for_site(site) as store:
        progress = (lambda m: None) if as_json else info
        report = _executor(site, site_file, store, backend, progress, reason).run(dry_run=dry_run)
        if not dry_run:  # RMA cases follow the run: swaps seen, qualifications passed (repair/rma.py)
            from ..repair import rma

            rma.sync(store)
    _print(report, "repair run", as_json, "repair: no open incidents")
    sys.exit(report.exit_code)


@click.command("qualify")
@click.argument("nodes", nargs=-1, required=True)
@site_option
@json_option
@dry_run_option
@reason_option("slurmadm repair qualify")
def qualify(nodes, site_file, as_json, dry_run, reason) -> None:
    """Run the qualification job on NODES now (hostlists allowed): a short stress, the single-node
    all-reduce, the known-answer test and the whole health suite, in the node's own reservation.

    A node with an incident takes the ladder's step (a pass closes it and resumes the node; two
    failures make a lemon). A node in service is drained for it and resumed on a pass. A drain
    that is not slurmadm's stays whatever the result. Exit 1 when a qualification failed or was
    held by the breaker, 2 for a node that cannot be qualified now (unknown, running jobs, DOWN,
    an RMA case or a lemon: nothing submitted), 3 when Slurm is unreachable."""
    from .. import hostlist
    from ..repair import gate
    from ..slurm import get_backend
    from ..store import Store

    names = [n for pattern in nodes for n in hostlist.expand(pattern, what="repair qualify NODE")]
    site = get_site(site_file)
    gate.known(names, site.node_names)  # before Slurm is asked anything
    backend = get_backend()
    with Store.for_site(site) as store:
        progress = (lambda m: None) if as_json else info
        report = gate.run(_executor(site, site_file, store, backend, progress, reason), names, dry_run=dry_run)
        if not dry_run:
            from ..repair import rma

            rma.sync(store)
    _print(report, "repair qualify", as_json, "repair qualify: nothing to do")
    sys.exit(report.exit_code)
