"""`slurmadm bmc ...`: out-of-band management through the nodes' BMCs (slurmadm/bmc/).

Every command takes a hostlist. A BMC that does not answer is one row with its error and makes
the exit code 3; a refused change (running jobs without --force/--drain) makes it 1.
"""

from __future__ import annotations

from contextlib import contextmanager

import click
from rich.markup import escape

from ..bmc import ops
from ..bmc.model import BOOT_DEVICES, POWER_ACTIONS
from ..errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, SlurmadmError
from ..store import Store
from .audit import parse_since
from .common import (Group, dry_run_option, get_site, info, json_option, print_json, reason_option,
                     site_option, warn, when)
from .common import markup_console as console  # this module escapes every value itself
from .common import markup_table as table


@click.group(cls=Group)
def bmc() -> None:
    """Power, sensors, event log, inventory, boot device, firmware and dead-node recovery through the BMCs."""


def _fleet(site):
    from ..bmc.fanout import Fleet

    return Fleet(site)


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


def _backend():
    from ..slurm import get_backend

    return get_backend()


def _exit(code: int) -> None:
    if code:
        raise SystemExit(code)


def _unreachable_rows(rows) -> list[tuple[str, str]]:
    return [(r.node, r.error) for r in rows if not r.ok]


def _show_errors(errors: list[tuple[str, str]]) -> None:
    if errors:
        console.print(table("unreachable", ["node", "error"], [(n, escape(e)) for n, e in errors]))


nodes_arg = click.argument("nodes", metavar="NODES")


def _safety_options(fn):
    fn = click.option("--force", is_flag=True, help="Act even on nodes with running jobs.")(fn)
    fn = click.option("--drain", is_flag=True,
                      help="Drain busy nodes, wait for their jobs to end (bmc.drain_timeout_s), act, leave them drained.")(fn)
    return fn


# ---------------------------------------------------------------------- power
@bmc.command()
@click.argument("action", type=click.Choice(["status", *POWER_ACTIONS]))
@nodes_arg
@site_option
@json_option
@dry_run_option
@_safety_options
@reason_option("slurmadm bmc power")
def power(action, nodes, site_file, as_json, dry_run, force, drain, reason) -> None:
    """Power status, or on|off|cycle|reset NODES. Off/cycle/reset refuse nodes with running jobs
    unless --force or --drain."""
    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    if action == "status":
        with _bar(fleet, "power status", as_json):
            rows = fleet.run(names, lambda c: c.bmc.power_state())
        if as_json:
            print_json([{"node": r.node, "power": r.value if r.ok else None, "error": r.error or None,
                         "seconds": r.seconds} for r in rows])
        else:
            from ..bmc.fold import fold_rows  # nodes that agree: one row

            console.print(table(None, ["nodes", "n", "power"],
                                [(escape(g.hostlist), str(g.count), escape(g.key[1]) if g.key[0] else
                                  f"[red]unreachable[/red]: {escape(g.named(g.key[1]))}") for g in fold_rows(rows)],
                                wrap=["nodes", "power"]))
        _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else 0)
        return
    try:
        backend = _backend()
    except SlurmadmError as exc:  # out-of-band power is for when Slurm is down: plan_power decides
        backend = ops.NoSlurm(str(exc))
    with _bar(fleet, "power status", as_json) as bar:
        steps = ops.plan_power(fleet, names, action, backend, force=force, drain=drain, warn=warn)
        if not dry_run:
            bar.what = f"power {action}"
            outcome = _power_apply(site, fleet, backend, steps, action, reason)
    if dry_run:
        _show_plan(steps, as_json, dry_run=True)
        _exit(_code(steps, {}))
        return
    for s in steps:
        if s.node in outcome.failed:
            s.error = outcome.failed[s.node]
    _show_plan(steps, as_json, dry_run=False)
    _exit(_code(steps, outcome.failed))


def _power_apply(site, fleet, backend, steps, action, reason) -> ops.Outcome:
    """Drain and wait where asked (--drain), then the power action, audited."""
    with Store.for_site(site) as store:
        stuck = {}
        if any(s.do and (s.drain or s.why == "drained; waiting for jobs") for s in steps):
            stuck = ops.drain_and_wait(backend, steps, f"bmc-power-{action}", reason,
                                       site.bmc.drain_timeout_s, info)
            for s in steps:
                if s.node in stuck:
                    s.do, s.action, s.why = False, "refused", stuck[s.node]
            store.audit_many([("bmc.drain", s.node, reason, {"for": f"power {action}"})
                              for s in steps if s.drain])
        return ops.apply_power(fleet, steps, action, store, reason)


def _code(steps, failed) -> int:
    if failed or any(s.error for s in steps):
        return EXIT_UNREACHABLE
    if any(s.action == "refused" for s in steps):
        return EXIT_PROBLEMS
    return 0


def _show_plan(steps, as_json: bool, *, dry_run: bool) -> None:
    if as_json:
        print_json({"dry_run": dry_run, "steps": [s.to_json() for s in steps]})
        return
    rows = []
    for s in steps:
        what = s.action if not s.error else "[red]unreachable[/red]"
        if s.do and not dry_run and not s.error:
            what = f"[green]{s.action}[/green]"
        elif s.action == "refused":
            what = "[yellow]refused[/yellow]"
        rows.append((s.node, s.power or "?", s.slurm, what, escape(s.error or s.why)))
    console.print(table("plan (dry run)" if dry_run else None, ["node", "power", "slurm", "action", "why"], rows))


# ---------------------------------------------------------------------- sensors
@bmc.command()
@nodes_arg
@site_option
@json_option
@click.option("--type", "kind", type=click.Choice(["temperature", "power", "fan", "voltage"]), default=None,
              help="Only sensors of this type (power includes the PSUs).")
@click.option("--alarms", is_flag=True, help="Only readings outside the BMC's thresholds (or failed states).")
def sensors(nodes, site_file, as_json, kind, alarms) -> None:
    """Sensor readings with the BMC's thresholds; out-of-range ones marked. Exit 1 if any alarm."""
    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    with _bar(fleet, "sensors", as_json):
        rows = ops.read_sensors(fleet, names, kind=kind, alarms=alarms)
    any_alarm = any(s.alarm for r in rows if r.ok for s in r.value)
    if as_json:
        print_json([{"node": r.node, "sensors": [s.to_json() for s in r.value] if r.ok else None,
                     "error": r.error or None} for r in rows])
    else:
        out = []
        for r in rows:
            for s in (r.value if r.ok else []):
                value = "" if s.value is None else f"{s.value:g} {s.unit}".strip()
                th = " ".join(f"{k}={v:g}" for k, v in s.thresholds.items())
                status = {"ok": "ok", "warning": "[yellow]warning[/yellow]"}.get(s.status, "[red]CRITICAL[/red]")
                out.append((r.node, escape(s.name), s.type, value or ", ".join(s.states), status, th))
        console.print(table(None, ["node", "sensor", "type", "reading", "status", "thresholds"], out))
        _show_errors(_unreachable_rows(rows))
    _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else EXIT_PROBLEMS if any_alarm else 0)


# ---------------------------------------------------------------------- SEL
@bmc.command()
@nodes_arg
@site_option
@json_option
@dry_run_option
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
        plan = [{"node": r.node, "would_clear": len(r.value) if r.ok else None, "error": r.error or None}
                for r in rows]
        if as_json:
            print_json({"dry_run": True, "plan": plan})
        else:
            console.print(table("plan (dry run)", ["node", "action"],
                                [(p["node"], f"clear {p['would_clear']} event(s)" if p["error"] is None
                                  else f"unreachable: {escape(p['error'])}") for p in plan]))
        _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else 0)
        return
    with _bar(fleet, "event log (read + clear)" if clear else "event log", as_json):
        if clear:
            with Store.for_site(site) as store:
                rows = ops.read_sel(fleet, names, since=since_ts, clear=True, store=store, reason=reason)
        else:
            rows = ops.read_sel(fleet, names, since=since_ts, clear=False, store=None, reason=reason)
    if as_json:
        print_json([{"node": r.node, "events": [e.to_json() for e in r.value] if r.ok else None,
                     "cleared": clear and r.ok, "error": r.error or None} for r in rows])
    else:
        out = []
        for r in rows:
            for e in (r.value if r.ok else []):
                sev = {"critical": "[red]critical[/red]", "warning": "[yellow]warning[/yellow]"}.get(e.severity, "info")
                out.append((r.node, escape(e.log), e.record_id, when(e.timestamp) if e.timestamp else "?",
                            escape(e.sensor), escape(e.event), sev))
        console.print(table(None, ["node", "log", "id", "when", "sensor", "event", "severity"], out))
        if clear:
            info(f"cleared the event log of {sum(r.ok for r in rows)} BMC(s)")
        _show_errors(_unreachable_rows(rows))
    _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else 0)


# ---------------------------------------------------------------------- inventory
@bmc.command()
@nodes_arg
@site_option
@json_option
@click.option("--redfish/--no-redfish", default=True, show_default=True,
              help="Also read the Redfish firmware inventory (BIOS, BMC, CPLD, NICs, HGX GPUs/NVSwitches).")
def inventory(nodes, site_file, as_json, redfish) -> None:
    """FRU (model, serial), BMC and BIOS firmware, and the Redfish firmware inventory."""
    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    with _bar(fleet, "inventory", as_json):
        rows = ops.read_inventory(fleet, names, redfish=redfish)
    errors = ops.inventory_errors(rows)
    if as_json:
        print_json([{"node": r.node, "inventory": r.value if r.ok else None,
                     "error": r.error or "; ".join(r.value.get("errors", [])) or None} for r in rows])
    else:
        out = []
        for r in rows:
            if not r.ok:
                continue
            v = r.value
            fw = v.get("firmware", {})
            out.append((r.node, v.get("model", ""), v.get("serial", ""), v.get("bmc_firmware", ""),
                        v.get("bios_firmware", fw.get("BIOS", "")), len(fw)))
        console.print(table(None, ["node", "model", "serial", "BMC", "BIOS", "firmware items"], out))
        _show_errors(errors)
    _exit(EXIT_UNREACHABLE if errors else 0)


# ---------------------------------------------------------------------- boot device
@bmc.command()
@click.argument("device", type=click.Choice(["status", *BOOT_DEVICES]))
@nodes_arg
@site_option
@json_option
@dry_run_option
@click.option("--persist", is_flag=True, help="Every boot, not only the next one.")
@reason_option("slurmadm bmc bootdev")
def bootdev(device, nodes, site_file, as_json, dry_run, persist, reason) -> None:
    """Show (status) or set the boot device override: pxe for re-imaging, disk, bios, default."""
    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    if device == "status" or dry_run:
        with _bar(fleet, "boot device", as_json):
            rows = fleet.run(names, lambda c: c.bmc.bootdev())
        data = ops.bootdev_plan(rows, device, persist, dry_run=dry_run)
        if as_json:
            print_json({"dry_run": True, "plan": data} if dry_run and device != "status" else data)
        else:
            cols = ["node", "bootdev", "persistent"] + (["action"] if device != "status" else [])
            out = [(d["node"], d["bootdev"] or "[red]unreachable[/red]", d["persistent"],
                    *([f"set {device}{' (persistent)' if persist else ''}" if d.get("would_change") else "nothing"]
                      if device != "status" else [])) for d in data]
            console.print(table("plan (dry run)" if device != "status" else None, cols, out))
            _show_errors(_unreachable_rows(rows))
        _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else 0)
        return
    with Store.for_site(site) as store, _bar(fleet, f"boot device {device}", as_json):
        rows, changed = ops.set_bootdev(fleet, names, device, persist, store, reason)
    if as_json:
        print_json([{"node": r.node, "changed": r.node in changed, "was": r.value["was"] if r.ok else None,
                     "error": r.error or None} for r in rows])
    else:
        console.print(table(None, ["node", "was", "now"],
                            [(r.node, r.value["was"], f"{device}{' (persistent)' if persist else ''}"
                              if r.node in changed else "unchanged") for r in rows if r.ok]))
        _show_errors(_unreachable_rows(rows))
    _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else 0)


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
    import time

    from ..bmc.recover import Recovery
    from ..files import exclusive_lock
    from ..errors import LockBusy

    site = get_site(site_file)
    names = ops.check_nodes(site, nodes) if nodes else None
    from .common import ProgressBar

    with Store.for_site(site) as store, ProgressBar("recover", enabled=not as_json) as bar:
        from ..store import read

        rec = Recovery(site, _fleet(site), _backend(), store, progress=info, bar=bar,
                       results_factory=(lambda: read.trusted(site)) if site.store.url else None)
        if dry_run:
            cands = rec.plan(names, record=False)
            _show_recover(cands, None, as_json, dry_run=True)
            return
        lock = __import__("pathlib").Path(f"{site.store.path}.bmc-recover.lock")
        deadline = time.monotonic() + (site.bmc.recover.grace_s + 600 if trigger else 0)
        while True:
            try:
                with exclusive_lock(lock, lambda holder: f"another recovery runs ({holder})"):
                    cands = rec.plan(names)
                    if trigger and any(c.action == "wait" for c in cands) and time.monotonic() < deadline:
                        wait = min(c.why for c in cands if c.action == "wait")
                        info(f"waiting: {wait}")
                        time.sleep(min(5.0, max(0.5, site.bmc.recover.grace_s / 10)))
                        continue
                    report = rec.run(cands, reason)
                break
            except LockBusy as exc:
                if sweep:
                    info(f"{exc}: this sweep leaves the nodes to it")
                    return
                if not trigger or time.monotonic() >= deadline:
                    raise
                time.sleep(2.0)
    _show_recover(cands, report, as_json, dry_run=False)
    unreachable = any("unreachable" in why or "did not answer" in why for why in report.failed.values())
    _exit(EXIT_UNREACHABLE if unreachable else EXIT_PROBLEMS if report.failed else 0)


def _show_recover(cands, report, as_json: bool, *, dry_run: bool) -> None:
    if as_json:
        print_json({"dry_run": dry_run, **(report.to_json() if report else
                                           {"candidates": [c.__dict__ for c in cands]})})
        return
    if not cands:
        console.print("no DOWN nodes")
        return
    rows = []
    for c in cands:
        result = ""
        if report is not None:
            result = ("[green]recovered[/green]" if c.node in report.recovered else
                      f"[red]{escape(report.failed[c.node])}[/red]" if c.node in report.failed else "")
        rows.append((c.node, c.action, escape(c.why), result))
    console.print(table("plan (dry run)" if dry_run else None, ["node", "action", "why", "result"], rows))


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
    import os
    import shlex
    import sys
    from pathlib import Path

    from ..files import write_atomic
    from ..proc import run

    site = get_site(site_file)
    site_path = os.path.abspath(site_file or os.environ.get("SLURMADM_SITE") or "/etc/slurmadm/site.toml")
    script = os.path.abspath(script)
    env = {k: os.environ[k] for k in ("SLURM_CONF",) if os.environ.get(k)}
    text = ("#!/bin/sh\n# written by `slurmadm bmc recover install-trigger`; Slurm's strigger runs it with the\n"
            "# nodes that went DOWN. It starts the recovery detached and returns at once.\n"
            f"export SLURMADM_SITE={shlex.quote(site_path)}\n"
            + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
            + 'nodes=$(echo "$*" | tr " " ",")\n'
            f"setsid {shlex.quote(sys.executable)} -m slurmadm bmc recover --trigger --nodes \"$nodes\" "
            f"--reason 'strigger: node down' >> {shlex.quote(os.path.abspath(log_file))} 2>&1 < /dev/null &\n"
            "exit 0\n")
    existing = run(["strigger", "--get", "--node", "--down"], check=False, timeout=20)
    if existing.returncode != 0:
        from ..errors import UnreachableError

        raise UnreachableError(f"strigger --get failed: {existing.stderr.strip() or existing.stdout.strip()}")
    have = script in existing.stdout.split()
    same = Path(script).exists() and Path(script).read_text() == text
    plan = []
    if not same:
        plan.append(f"write {script}")
    if not have:
        plan.append(f"strigger --set --node --down --flags=PERM --program={script}")
    if not plan:
        console.print(f"trigger already installed ({script})")
        return
    for step in plan:
        console.print(("would: " if dry_run else "") + step)
    if dry_run:
        return
    if not same:
        write_atomic(Path(script), text, mode=0o755)
    if not have:
        run(["strigger", "--set", "--node", "--down", "--flags=PERM", f"--program={script}"], timeout=20)
    with Store.for_site(site) as store:
        store.audit("bmc.recover.install-trigger", script, reason, steps=plan)


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
@nodes_arg
@site_option
@json_option
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
    if as_json:
        print_json({"baseline": site.bmc.firmware,
                    "nodes": [{"node": r.node, "firmware": r.value if r.ok else None, "error": r.error or None}
                              for r in rows],
                    "drift": [{"node": d.node, "component": d.component, "have": d.have, "want": d.want}
                              for d in drift if not d.ok]})
    else:
        console.print(table(None, ["node", "component", "have", "baseline", "status"],
                            [(d.node, d.component, d.have or "-", d.want,
                              "ok" if d.ok else "[red]missing[/red]" if d.have is None else "[yellow]drift[/yellow]")
                             for d in drift]))
        _show_errors(_unreachable_rows(rows))
    _exit(EXIT_UNREACHABLE if any(not r.ok for r in rows) else EXIT_PROBLEMS if any(not d.ok for d in drift) else 0)


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
    from ..bmc.redfish import _fetch

    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    backend = _backend()
    states = ops.slurm_view(backend, names)
    with _bar(fleet, "firmware", as_json):
        current = {r.node: r for r in fleet.run(names, lambda c: c.redfish.firmware())}
    plan = fw.plan_update(names, current, states, component, version=version, force=force, drain=drain)
    todo = [p["node"] for p in plan if p["action"] == "update"]
    waves = fw.waves(todo, site.software.canary_nodes, site.software.wave_fraction)
    if dry_run or not todo:
        if as_json:
            print_json({"dry_run": dry_run, "plan": plan, "waves": waves,
                        "failure_budget": fw.budget(len(todo), site.software.max_failed_fraction)})
        else:
            console.print(table("plan (dry run)" if dry_run else "nothing to update",
                                ["node", "action", "why"], [(p["node"], p["action"], escape(p["why"])) for p in plan]))
            if waves:
                console.print("waves: " + " | ".join(",".join(w) for w in waves))
        _exit(EXIT_UNREACHABLE if any(p["action"] == "unreachable" for p in plan) else
              EXIT_PROBLEMS if any(p["action"] == "refused" for p in plan) else 0)
        return
    image = _fetch(image_url) if push else None
    with Store.for_site(site) as store, _bar(fleet, f"firmware update {component}", as_json):
        waiting = [ops.Step(p["node"], "firmware update", True, "" if p["drain"] else "drained; waiting for jobs",
                            drain=p["drain"]) for p in plan if p.get("wait")]
        if waiting:
            stuck = ops.drain_and_wait(backend, waiting, "bmc-firmware-update", reason, site.bmc.drain_timeout_s,
                                       info)
            store.audit_many([("bmc.drain", s.node, reason, {"for": f"firmware update {component}"})
                              for s in waiting if s.drain])
            for p in plan:
                if p["node"] in stuck:
                    p.update(action="refused", why=stuck[p["node"]])
            todo = [n for n in todo if n not in stuck]
        out = fw.rollout(fleet, todo, component, image_url, image, store, reason, task_timeout_s=task_timeout,
                         progress=info, version=version)
    if as_json:
        print_json({"plan": plan, **out})
    else:
        rows = [(n, r.get("before", ""), r.get("after", ""), r.get("task", ""),
                 "[green]ok[/green]" if r["ok"] else f"[red]failed[/red] {escape(r.get('error') or '; '.join(r.get('messages', [])))}")
                for n, r in out["results"].items()]
        rows += [(p["node"], "", "", "", f"[yellow]{p['action']}[/yellow] {escape(p['why'])}")
                 for p in plan if p["action"] in ("refused", "unreachable")]
        console.print(table(None, ["node", "before", "after", "task", "result"], rows))
        if out["stopped"]:
            console.print(f"[red]{out['stopped']}[/red]; not started: {', '.join(out['not_started'])}")
    _exit(EXIT_UNREACHABLE if any(p["action"] == "unreachable" for p in plan) else
          EXIT_PROBLEMS if out["failed"] or out["stopped"] or any(p["action"] == "refused" for p in plan) else 0)


# ---------------------------------------------------------------------- BMC health
@bmc.command("health")
@nodes_arg
@site_option
@json_option
@dry_run_option
def health_cmd(nodes, site_file, as_json, dry_run) -> None:
    """BMC sensors and SEL as node health (bmc-temperature, bmc-psu, bmc-fan, bmc-sel): drain on
    failure under the health breaker, resume after clean runs. For cron on the head node. Exit 1
    when a check failed, 3 when a BMC was unreachable."""
    from ..bmc import health as bh

    site = get_site(site_file)
    names = ops.check_nodes(site, nodes)
    fleet = _fleet(site)
    with Store.for_site(site) as store, _bar(fleet, "BMC health", as_json):
        out = bh.run(site, fleet, _backend(), store, names, act=not dry_run)
    if as_json:
        print_json(out)
    else:
        style = {"pass": "green", "fail": "red", "error": "magenta"}
        console.print(table(None, ["node", "check", "status", "detail"],
                            [(v["node"], v["check_id"], f"[{style[v['status']]}]{v['status']}[/]", escape(v["detail"]))
                             for v in out["verdicts"]]))
        for a in out["actions"]:
            console.print(f"{a['node']}: {a['action']}: {escape(a['why'])}")
    failed = any(v["status"] == "fail" for v in out["verdicts"])
    _exit(EXIT_UNREACHABLE if out["unreachable"] else EXIT_PROBLEMS if failed else 0)
