"""`slurmadm bmc ...`: out-of-band management through the nodes' BMCs (slurmadm/bmc/).

Every command takes a hostlist. A BMC that does not answer is one row with its error and makes
the exit code 3; a refused change (running jobs without --force/--drain) makes it 1. What each
command shows (tables, --json, exit codes) is built in slurmadm/bmc/views.py; this module only
parses arguments and prints.
"""

from __future__ import annotations

from contextlib import contextmanager

import click
from rich.text import Text

from ..bmc import ops
from ..bmc import views as v
from ..bmc.model import BOOT_DEVICES, POWER_ACTIONS
from ..store import Store
from .audit import parse_since
from .common import Group, console, dry_run_option, get_site, info, json_option, print_json, reason_option
from .common import site_option, styled, table, warn, when


@click.group(cls=Group)
def bmc() -> None:
    """Out-of-band management through the BMCs (IPMI, Redfish).

    Power, sensors, event log, inventory, boot device, firmware and dead-node recovery through the BMCs."""


def _fleet(site):
    from ..bmc.fanout import Fleet

    return Fleet(site)


def _backend():
    from ..slurm import get_backend

    return get_backend()


@contextmanager
def _bar(fleet, what: str, as_json: bool):
    """A progress bar on stderr over the fleet's passes, for people only (a terminal, no --json)."""
    from .common import ProgressBar

    with ProgressBar(what, enabled=not as_json) as bar:
        fleet.bar = bar
        try:
            yield bar
        finally:
            fleet.bar = None


def _cell(c):
    return styled(*c) if isinstance(c, tuple) else Text.assemble(*c) if isinstance(c, list) else c


def _show(t: v.Table | None) -> None:
    if t is not None:
        title, cols, rows, *wrap = t  # a 4th item: the columns that wrap (views.Table)
        console.print(table(title, cols, [[_cell(c) for c in row] for row in rows], **({"wrap": wrap[0]} if wrap else {})))


def _out(as_json: bool, data, tables, errors=(), code: int = 0, note: str | None = None, lines=()) -> None:
    """--json: the data; else each table, the lines, the note (stderr), the unreachable BMCs.
    Then exit with `code`."""
    if as_json:
        print_json(data)
    else:
        for t in tables:
            _show(t)
        for line in lines:
            console.print(_cell(line) if isinstance(line, list) else line)
        if note:
            info(note)
        _show(v.errors_table(list(errors)))
    if code:
        raise SystemExit(code)


nodes_arg = click.argument("nodes", metavar="NODES")


def _on_nodes(*more):
    """NODES, --site, --json, then `more` (option decorators, in their order) on a command."""
    def deco(fn):
        for d in reversed((nodes_arg, site_option, json_option, *more)):
            fn = d(fn)
        return fn
    return deco


def _safety_options(fn):
    fn = click.option("--force", is_flag=True, help="Act even on nodes with running jobs.")(fn)
    fn = click.option("--drain", is_flag=True,
                      help="Drain busy nodes, wait for their jobs to end (bmc.drain_timeout_s), act, leave them drained.")(fn)
    return fn


def _start(site_file, nodes):
    site = get_site(site_file)
    return site, ops.check_nodes(site, nodes), _fleet(site)


# ---------------------------------------------------------------------- power
@bmc.command()
@click.argument("action", type=click.Choice(["status", *POWER_ACTIONS]))
@_on_nodes(dry_run_option)
@_safety_options
@reason_option("slurmadm bmc power")
def power(action, nodes, site_file, as_json, dry_run, force, drain, reason) -> None:
    """Power status, or on|off|cycle|reset NODES. Off/cycle/reset refuse nodes with running jobs
    unless --force or --drain."""
    site, names, fleet = _start(site_file, nodes)
    if action == "status":
        with _bar(fleet, "power status", as_json):
            rows = fleet.run(names, lambda c: c.bmc.power_state())
        _out(as_json, v.power_status_json(rows), [v.power_status_table(rows)], code=v.code(rows))
        return
    backend = ops.backend_or_none(_backend)
    failed: dict[str, str] = {}
    with _bar(fleet, "power status", as_json) as bar:
        steps = ops.plan_power(fleet, names, action, backend, force=force, drain=drain, warn=warn)
        if not dry_run:
            bar.what = f"power {action}"
            failed = ops.power(site, fleet, backend, steps, action, reason, info).failed
    _out(as_json, v.plan_json(steps, dry_run=dry_run), [v.plan_table(steps, dry_run=dry_run)],
         code=v.plan_code(steps, failed))


# ---------------------------------------------------------------------- sensors
@bmc.command()
@_on_nodes()
@click.option("--type", "kind", type=click.Choice(["temperature", "power", "fan", "voltage"]), default=None,
              help="Only sensors of this type (power includes the PSUs).")
@click.option("--alarms", is_flag=True, help="Only readings outside the BMC's thresholds (or failed states).")
def sensors(nodes, site_file, as_json, kind, alarms) -> None:
    """Sensor readings with the BMC's thresholds; out-of-range ones marked. Exit 1 if any alarm."""
    site, names, fleet = _start(site_file, nodes)
    with _bar(fleet, "sensors", as_json):
        rows = ops.read_sensors(fleet, names, kind=kind, alarms=alarms)
    _out(as_json, v.sensors_json(rows), [v.sensors_table(rows)], v.unreachable(rows), v.sensors_code(rows))


# ---------------------------------------------------------------------- SEL
@bmc.command()
@_on_nodes(dry_run_option)
@click.option("--since", help="Only events since a date (2026-11-01) or an age (24h, 7d).")
@click.option("--clear", is_flag=True, help="Clear the log in the same step as reading it (nothing logged in between is lost); audited.")
@reason_option("slurmadm bmc sel --clear")
def sel(nodes, site_file, as_json, dry_run, since, clear, reason) -> None:
    """The BMC event log, decoded."""
    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    since_ts = parse_since(since)
    fleet = _fleet(site)
    if clear and dry_run:
        with _bar(fleet, "event log", as_json):
            rows = ops.read_sel(fleet, names, since=None, clear=False, store=None, reason=reason)
        plan = v.sel_clear_plan(rows)
        _out(as_json, {"dry_run": True, "plan": plan}, [v.sel_clear_plan_table(plan)], code=v.code(rows))
        return
    with _bar(fleet, "event log (read + clear)" if clear else "event log", as_json):
        if clear:
            with Store.for_site(site) as store:
                rows = ops.read_sel(fleet, names, since=since_ts, clear=True, store=store, reason=reason)
        else:
            rows = ops.read_sel(fleet, names, since=since_ts, clear=False, store=None, reason=reason)
    _out(as_json, v.sel_json(rows, cleared=clear), [v.sel_table(rows, when)], v.unreachable(rows), v.code(rows),
         note=f"cleared the event log of {sum(r.ok for r in rows)} BMC(s)" if clear else None)


# ---------------------------------------------------------------------- inventory
@bmc.command()
@_on_nodes()
@click.option("--redfish/--no-redfish", default=True, show_default=True,
              help="Also read the Redfish firmware inventory (BIOS, BMC, CPLD, NICs, HGX GPUs/NVSwitches).")
def inventory(nodes, site_file, as_json, redfish) -> None:
    """FRU (model, serial), BMC and BIOS firmware, and the Redfish firmware inventory."""
    site, names, fleet = _start(site_file, nodes)
    with _bar(fleet, "inventory", as_json):
        rows = ops.read_inventory(fleet, names, redfish=redfish)
    with Store.for_site(site) as store:
        ops.record_inventory(store, rows)  # the parts inventory (`repair parts`) reads it back
    errors = ops.inventory_errors(rows)
    _out(as_json, v.inventory_json(rows), [v.inventory_table(rows)], errors, v.EXIT_UNREACHABLE if errors else 0)


# ---------------------------------------------------------------------- boot device
@bmc.command()
@click.argument("device", type=click.Choice(["status", *BOOT_DEVICES]))
@_on_nodes(dry_run_option)
@click.option("--persist", is_flag=True, help="Every boot, not only the next one.")
@reason_option("slurmadm bmc bootdev")
def bootdev(device, nodes, site_file, as_json, dry_run, persist, reason) -> None:
    """Show (status) or set the boot device override: pxe for re-imaging, disk, bios, default."""
    site, names, fleet = _start(site_file, nodes)
    if device == "status" or dry_run:
        with _bar(fleet, "boot device", as_json):
            rows = fleet.run(names, lambda c: c.bmc.bootdev())
        data = ops.bootdev_plan(rows, device, persist, dry_run=dry_run)
        _out(as_json, v.bootdev_status_json(data, device, dry_run=dry_run),
             [v.bootdev_status_table(data, device, persist)], v.unreachable(rows), v.code(rows))
        return
    with Store.for_site(site) as store, _bar(fleet, f"boot device {device}", as_json):
        rows, changed = ops.set_bootdev(fleet, names, device, persist, store, reason)
    _out(as_json, v.bootdev_set_json(rows, changed), [v.bootdev_set_table(rows, changed, device, persist)],
         v.unreachable(rows), v.code(rows))


# ---------------------------------------------------------------------- recover
@bmc.group(cls=Group, invoke_without_command=True)
@click.option("--nodes", "nodes", default=None, help="Only these nodes (hostlist; default: every DOWN node).")
@site_option
@json_option
@dry_run_option
@click.option("--trigger", is_flag=True,
              help="Run for Slurm's strigger: wait out the grace period for --nodes, then recover them.")
@click.option("--sweep", is_flag=True,
              help="Run from the timer/cron sweep (install-sweep): when another recovery runs, leave it and exit 0.")
@reason_option("slurmadm bmc recover")
@click.pass_context
def recover(ctx, nodes, site_file, as_json, dry_run, trigger, sweep, reason) -> None:
    """Power-cycle nodes Slurm has had DOWN/NOT_RESPONDING longer than bmc.recover.grace_s, wait
    for slurmd and a clean health run, resume them (see slurmadm/bmc/recover.py). Exit 1 when a
    node could not be recovered, 3 when a BMC was unreachable."""
    if ctx.invoked_subcommand is not None:
        return
    from ..bmc import recover as rc
    from .common import ProgressBar

    site = get_site(site_file)
    names = ops.check_nodes(site, nodes) if nodes else None
    with Store.for_site(site) as store, ProgressBar("recover", enabled=not as_json) as bar:
        rec = rc.recovery(site, _fleet(site), _backend(), store, progress=info, bar=bar)
        if dry_run:
            cands, report = rec.plan(names, record=False), None
        elif (done := rc.run_locked(rec, names, reason, trigger=trigger, sweep=sweep, progress=info)) is None:
            return  # the sweep left the nodes to a recovery that runs
        else:
            cands, report = done
    if not as_json and not cands:
        console.print("no DOWN nodes")
        return
    _out(as_json, v.recover_json(cands, report, dry_run=dry_run), [v.recover_table(cands, report, dry_run=dry_run)],
         code=v.recover_code(report) if report else 0)


@recover.command("install-trigger")
@site_option
@dry_run_option
@click.option("--path", "script", default="/etc/slurmadm/bmc-recover-trigger.sh", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the program strigger runs.")
@click.option("--log", "log_file", default="/var/log/slurmadm-bmc-recover.log", show_default=True,
              type=click.Path(dir_okay=False), help="Where the triggered recoveries log.")
@reason_option("slurmadm bmc recover install-trigger")
def install_trigger(site_file, dry_run, script, log_file, reason) -> None:
    """Register a permanent Slurm trigger (strigger --set --node --down --flags=PERM) that runs
    `slurmadm bmc recover --trigger` for nodes going DOWN. Idempotent."""
    from ..bmc import trigger

    site = get_site(site_file)
    plan = trigger.plan(site_file, script, log_file)
    if not plan.steps:
        console.print(f"trigger already installed ({plan.script})")
        return
    for step in plan.steps:
        console.print(("would: " if dry_run else "") + step)
    if not dry_run:
        with Store.for_site(site) as store:
            trigger.install(plan, store, reason)


@recover.command("install-sweep")
@site_option
@json_option
@dry_run_option
@click.option("--systemd", "kind", flag_value="systemd", default=True,
              help="A systemd service + timer (default).")
@click.option("--cron", "kind", flag_value="cron", help="A /etc/cron.d entry instead.")
@click.option("--interval", default="5m", show_default=True,
              help="How often the sweep runs: 5m, 90s, 1h (cron: minutes dividing 60 or hours dividing 24).")
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              help="Directory to write into (default /etc/systemd/system or /etc/cron.d).")
@click.option("--log", "log_file", default="/var/log/slurmadm-bmc-recover.log", show_default=True,
              type=click.Path(dir_okay=False), help="Where the cron sweep logs (systemd: the journal).")
@reason_option("slurmadm bmc recover install-sweep")
def install_sweep(site_file, as_json, dry_run, kind, interval, dest, log_file, reason) -> None:
    """Run `slurmadm bmc recover --sweep` every --interval from a systemd timer (or cron): it
    catches the DOWN nodes a Slurm trigger missed. Idempotent; --dry-run shows the files."""
    from ..bmc import sweep
    from ..sitefile import site_path
    from .common import install_files

    seconds = sweep.parse_interval(interval)
    site = get_site(site_file)
    files = sweep.plan(site, str(site_path(site_file)), kind=kind, interval_s=seconds, dest=dest, log=log_file)
    install_files(site, files, action="bmc.recover.install-sweep", reason=reason, dry_run=dry_run,
                  as_json=as_json, kind=kind, interval_s=seconds,
                  then=f"systemctl daemon-reload && systemctl enable --now {sweep.UNIT}.timer"
                  if kind == "systemd" else None)


# ---------------------------------------------------------------------- firmware
@bmc.group(cls=Group)
def firmware() -> None:
    """Firmware against the site's [bmc.firmware] baseline, and Redfish updates in waves."""


@firmware.command("status")
@_on_nodes()
def firmware_status(nodes, site_file, as_json) -> None:
    """Each baseline component of each node: ok, drift or missing. Exit 1 on any drift."""
    from ..bmc import firmware as fw

    site = get_site(site_file)
    if not site.bmc.firmware:
        from ..errors import UsageError

        raise UsageError("bmc.firmware: the site has no firmware baseline ([bmc.firmware] component = version)")
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    with _bar(fleet, "firmware", as_json):
        rows, drift = fw.status(fleet, names)
    _out(as_json, v.firmware_status_json(site.bmc.firmware, rows, drift), [v.firmware_status_table(drift)],
         v.unreachable(rows), v.firmware_status_code(rows, drift))


@firmware.command("update")
@nodes_arg
@click.option("--component", required=True, help="Firmware inventory id (BIOS, BMC, HGX_FW_GPU_SXM_1, ...).")
@click.option("--image", "image_url", required=True,
              help="Image URL the BMCs fetch (SimpleUpdate), or a local path/URL slurmadm pushes (--push).")
@click.option("--push", is_flag=True, help="Push the image (multipart) instead of letting the BMC fetch it.")
@click.option("--version", "version", default=None,
              help="The version the image carries: nodes already there are skipped, and a node counts as "
                   "updated only when it reports it afterwards.")
@click.option("--task-timeout", type=click.FloatRange(1, 7200), default=1800, show_default=True,
              help="Seconds to follow each BMC's update task.")
@click.option("--force", is_flag=True, help="Also nodes that are not drained and idle.")
@click.option("--drain", is_flag=True,
              help="Drain nodes that are not drained, wait for their jobs to end (bmc.drain_timeout_s), update, "
                   "leave them drained.")
@site_option
@json_option
@dry_run_option
@reason_option("slurmadm bmc firmware update")
def firmware_update(nodes, component, image_url, push, version, task_timeout, force, drain, site_file, as_json,
                    dry_run, reason) -> None:
    """Update one component over Redfish on drained idle nodes, canary first, then in waves with
    a failure budget; each task followed to the end and the version re-read. With --drain, busy
    or undrained nodes are drained first (`slurmadm: bmc-firmware-update: REASON [bmc]`) and
    updated once idle; nodes still busy after bmc.drain_timeout_s are left drained, not updated."""
    from ..bmc import firmware as fw

    site, names, fleet = _start(site_file, nodes)
    backend = _backend()
    with _bar(fleet, "firmware", as_json):
        plan, todo, waves = fw.prepare_update(fleet, backend, names, component, version=version, force=force,
                                              drain=drain)
    if dry_run or not todo:
        _out(as_json, {"dry_run": dry_run, "plan": plan, "waves": waves,
                       "failure_budget": fw.budget(len(todo), site.software.max_failed_fraction)},
             [v.firmware_plan_table(plan, dry_run=dry_run)], code=v.firmware_plan_code(plan),
             lines=["waves: " + " | ".join(",".join(w) for w in waves)] if waves else [])
        return
    with Store.for_site(site) as store, _bar(fleet, f"firmware update {component}", as_json):
        out = fw.update(fleet, backend, plan, todo, component, image_url, push=push, store=store, reason=reason,
                        task_timeout_s=task_timeout, progress=info, version=version)
    _out(as_json, {"plan": plan, **out}, [v.firmware_update_table(plan, out)], code=v.firmware_plan_code(plan, out),
         lines=[[(out["stopped"], "red"), f"; not started: {', '.join(out['not_started'])}"]] if out["stopped"] else [])


# ---------------------------------------------------------------------- BMC health
@bmc.command("health")
@_on_nodes(dry_run_option)
def health_cmd(nodes, site_file, as_json, dry_run) -> None:
    """BMC sensors and SEL as node health (bmc-temperature, bmc-psu, bmc-fan, bmc-sel): drain on
    failure under the health breaker, resume after clean runs. For cron on the head node. Exit 1
    when a check failed, 3 when a BMC was unreachable."""
    from ..bmc import health as bh

    site, names, fleet = _start(site_file, nodes)
    with Store.for_site(site) as store, _bar(fleet, "BMC health", as_json):
        out = bh.run(site, fleet, _backend(), store, names, act=not dry_run)
    _out(as_json, out, [v.health_table(out)], code=v.health_code(out),
         lines=[f"{a['node']}: {a['action']}: {a['why']}" for a in out["actions"]])
