"""`slurmadm repair ...`: incidents kept by part, the ladder that carries them back to service
(slurmadm/repair/). This module only parses and prints (repair/views.py)."""

from __future__ import annotations

import time

import click

from ..errors import UsageError
from . import repair_run
from .common import (
    Group,
    console,
    dry_run_option,
    get_site,
    install_files,
    json_option,
    print_json,
    say,
    site_option,
    table,
    when,
)


@click.group(cls=Group)
def repair() -> None:
    """Hardware faults from first signal to a node back in service.

    Incidents by part, the ladder (reset, reboot, qualify, resume, RMA), lemons, and an admin's
    manual repair."""


@repair.command("ladder")
@site_option
@json_option
def ladder_cmd(site_file, as_json) -> None:
    """The ladder per incident class, with its sources and the site's overrides."""
    from ..repair import views

    s = views.settings_of(get_site(site_file))
    if as_json:
        print_json(views.ladder_json(s))
        return
    console.print(table(None, ["class", "part", "window d", "rungs (a failed step moves right)", "source"],
                        views.ladder_rows(s), wrap=["source"], optional=["source"]))
    say(f"lemon: >= {s.lemon_incidents} incidents in {s.lemon_window_days} days on a node or GPU serial, "
        f"or {s.lemon_failed_qualifications} failed qualifications")
    say("auto-resumed by health, no incident: " + ", ".join(views.auto_resume()))


@repair.command("status")
@site_option
@json_option
@click.option("--all", "show_all", is_flag=True, help="Also RMA candidates and lemons (held); default: all not closed.")
def status(site_file, as_json, show_all) -> None:
    """Incidents not closed, folded by class, state and next step (ingests new signals first)."""
    from ..repair import incidents, views
    from ..repair.model import STATES

    site = get_site(site_file)
    now = time.time()
    with views.opened(site) as store:
        views.ingest(site, store, now=now)
        items = incidents.list_incidents(store, states=[s for s in STATES if s != "closed"])
        rows = views.status_json(items, views.settings_of(site), store, now)
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no incidents open")
        return
    console.print(table(None, ["nodes", "class", "part", "state", "last step", "next", "oldest"],
                        views.status_rows(rows, now), optional=["part"]))


@repair.command("history")
@click.argument("node", required=False)
@click.option("--gpu", "serial", help="A GPU's serial (or UUID): its incidents on every node it was in.")
@site_option
@json_option
def history(node, serial, site_file, as_json) -> None:
    """A node's incidents, or a GPU's by serial across nodes, oldest first."""
    from ..repair import incidents, views

    if (node is None) == (serial is None):
        raise UsageError("repair history: give a NODE or --gpu SERIAL (one of them)")
    site = get_site(site_file)
    with views.opened(site) as store:
        views.ingest(site, store)
        views.check_target(site, store, node, serial)
        items = incidents.history(store, node=node, serial=serial)
    if as_json:
        print_json(views.history_json(items))
        return
    if not items:
        console.print(f"{node or serial}: no incidents")
        return
    console.print(table(None, ["opened", "node", "part", "class", "state", "step", "signals", "closed", "why"],
                        views.history_rows(items, when), wrap=["why"], optional=["closed"]))


@repair.command("lemons")
@site_option
@json_option
def lemons(site_file, as_json) -> None:
    """Nodes and GPU serials with too many incidents or failed qualifications: never resumed
    automatically."""
    from ..repair import views

    site = get_site(site_file)
    with views.opened(site) as store:
        views.ingest(site, store)
        items = views.lemons(store, views.settings_of(site))
    if as_json:
        print_json(items)
        return
    if not items:
        console.print("no lemons")
        return
    console.print(table(None, ["kind", "name", "incidents", "held", "why"], views.lemon_rows(items), wrap=["why"]))


@repair.command("clear")
@click.argument("node")
@click.option("--reason", required=True, help="What was repaired (recorded in the audit event).")
@click.option("--resume", is_flag=True, help="Also resume the node when its drain is slurmadm's (a lemon's too).")
@site_option
@json_option
@dry_run_option
def clear(node, reason, resume, site_file, as_json, dry_run) -> None:
    """Record an admin's manual repair of NODE: end its incidents (audited). Its drain stays
    unless --resume: `slurmadm repair qualify NODE` then tests it and resumes it on a pass.
    Someone else's drain always stays."""
    from ..repair import incidents, views

    site = get_site(site_file)
    with views.opened(site) as store:
        views.ingest(site, store)
        views.check_target(site, store, node, None)
        backend = _backend() if resume else None
        if backend is not None:
            backend.nodes([node])  # Slurm unreachable: exit 3 before anything is cleared
        done = incidents.clear(store, node, reason, dry_run=dry_run)
        resumed = views.resume_cleared(backend, store, node, reason, dry_run=dry_run) if backend else ""
    if as_json:
        print_json({"node": node, "dry_run": dry_run, "cleared": [i.id for i in done], "resume": resumed or None})
        return
    if not done:
        console.print(f"{node}: no incident to clear")
    verb = "would clear" if dry_run else "cleared"
    for i in done:
        console.print(f"{node}: {verb} {i.id} ({i.cls}, {views.part_text(i)}, {i.state})")
    if resumed:
        console.print(f"{node}: {resumed}")
    elif done:
        console.print(f"{node}: its drain stays; `slurmadm repair qualify {node}` tests it and resumes it on a pass "
                      "(or clear with --resume)")


def _backend():
    from ..slurm import get_backend

    return get_backend()


@repair.command("install-timer")
@site_option
@json_option
@dry_run_option
@click.option("--systemd", "kind", flag_value="systemd", default=True, help="A systemd service + timer (default).")
@click.option("--cron", "kind", flag_value="cron", help="A /etc/cron.d entry instead.")
@click.option("--interval", default=None, help="How often: 5m, 90s, 1h (default: [repair].interval_s).")
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              help="Directory to write into (default /etc/systemd/system or /etc/cron.d).")
@click.option("--log", "log_file", default="/var/log/slurmadm-repair.log", show_default=True,
              help="Where the cron entry appends its output.")
@click.option("--reason", default="slurmadm repair install-timer", show_default=True,
              help="Why: recorded in the audit event.")
def install_timer(site_file, as_json, dry_run, kind, interval, dest, log_file, reason) -> None:
    """Run `slurmadm repair run` on a systemd timer (or cron)."""
    from ..bmc.sweep import parse_interval
    from ..repair import timer
    from ..sitefile import site_path

    site = get_site(site_file)
    files = timer.plan(site, str(site_path(site_file)), kind=kind,
                       interval_s=parse_interval(interval) if interval else None, dest=dest, log=log_file)
    install_files(site, files, action="repair.install-timer", reason=reason, dry_run=dry_run, as_json=as_json,
                  then=f"systemctl daemon-reload && systemctl enable --now {timer.UNIT}.timer"
                  if kind == "systemd" else None)


repair.add_command(repair_run.run)  # the executor (slurmadm/repair/run.py)
repair.add_command(repair_run.qualify)  # the gate on an admin's word (slurmadm/repair/gate.py)


# ---- parts inventory and RMA cases (issue 35): slurmadm/cli/repair_rma.py ----
def _add_parts_and_rma() -> None:
    from .repair_rma import parts, rma

    repair.add_command(parts)
    repair.add_command(rma)


_add_parts_and_rma()
