"""`slurmadm fleet ...`: every node's software stack over SSH (slurmadm/fleet/): facts, drift
against the baseline, commands on many nodes, canary rollouts."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from .. import fleet as fleetmod
from ..errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, UsageError
from ..hostlist import compress, expand, fold, neutral
from ..store import Store
from .common import Group, dry_run_option, get_site, json_option, print_json, progress, reason_option
from .common import site_option, when
from .common import markup_console as console  # this module escapes every value itself
from .common import markup_table as table


@click.group(cls=Group)
def fleet() -> None:
    """One software stack on every node, over SSH.

    One software stack on every node: facts, drift, commands, canary rollouts (over SSH)."""


def _nodes(site, pattern: str | None) -> list[str]:
    if not pattern:
        return list(site.node_names)
    names = expand(pattern, what="NODES")
    unknown = [n for n in names if n not in set(site.node_names)]
    if unknown:
        raise UsageError(f"NODES: {compress(unknown)} not in the site's nodes ({compress(site.node_names)})")
    return names


def _unreachable_rows(got) -> list[tuple[str, str]]:
    return [(n, nf.error) for n, nf in got.items() if nf.error]


@fleet.command()
@click.argument("nodes", required=False)
@click.option("--refresh/--cached", default=True, show_default=True,
              help="Collect now from every node, or use the stored facts where there are some.")
@click.option("--bmc/--no-bmc", "bmc", default=None,
              help="Also read each BMC's firmware inventory (fw:<component> facts) [default: when the "
                   "site's bmc.password_file exists].")
@site_option
@json_option
def facts(nodes, refresh, bmc, site_file, as_json) -> None:
    """Each node's software facts (OS image, kernel, driver, CUDA, NCCL, cuDNN, OFED, MPI,
    container runtimes, fabric manager, VBIOS, file hashes, kernel command line, and the BMC's
    firmware inventory), stored with their time. Exit 3 when a node could not be reached."""
    site = get_site(site_file)
    names = _nodes(site, nodes)
    got = fleetmod.facts(site, names, refresh=refresh, bmc=bmc)
    if as_json:
        print_json({"nodes": [nf.as_dict() for nf in got.values()]})
    else:
        # one row per fact and value, its nodes folded (readable for 4 nodes or 128)
        values: dict[str, dict[str, list[str]]] = {}
        for n, nf in got.items():
            for k, v in nf.facts.items():
                if k == "hostname":
                    continue
                values.setdefault(k, {}).setdefault(v, []).append(n)
        rows = []
        for k in sorted(values, key=lambda k: (k.startswith(("file:", "pkg:")), k)):
            for v, ns in sorted(values[k].items(), key=lambda kv: -len(kv[1])):
                rows.append((escape(k), escape(_short(v)), compress(ns)))
        console.print(table(None, ["fact", "value", "nodes"], rows))
        stamps = [nf.ts for nf in got.values() if nf.ts]
        if stamps:
            console.print(f"collected {when(min(stamps))}" + ("" if min(stamps) == max(stamps) else
                                                              f" .. {when(max(stamps))}"))
        for n, e in _unreachable_rows(got):
            console.print(f"[red]{n}: {escape(e)}[/red]")
        for n, nf in got.items():
            if nf.bmc_error:
                console.print(f"[yellow]{n}: no firmware facts: {escape(nf.bmc_error)}[/yellow]")
    if _unreachable_rows(got):
        sys.exit(EXIT_UNREACHABLE)


@fleet.command()
@click.argument("nodes", required=False)
@click.option("--cached", is_flag=True, help="Use the stored facts where there are some (default: collect now).")
@click.option("--drain", is_flag=True, help="Drain drifted nodes (slurmadm: drift: ...), under the health "
                                            "breaker; resume nodes drained for drift that no longer drift.")
@dry_run_option
@reason_option("software drift")
@site_option
@json_option
def drift(nodes, cached, drain, dry_run, reason, site_file, as_json) -> None:
    """Every fact against the site's [software] baseline, else the fleet's most common value.
    Exit 1 on drift, 3 when a node was unreachable."""
    site = get_site(site_file)
    names = _nodes(site, nodes)
    got = fleetmod.facts(site, names, refresh=not cached)
    diffs = fleetmod.drift(site, got)
    actions = []
    if drain:
        from ..fleet import actions as factions
        from ..slurm import get_backend

        backend = get_backend()
        drifted = fleetmod.per_node(diffs)
        clean = [n for n, nf in got.items() if not nf.error and n not in drifted]
        actions = factions.plan_drains(drifted, clean, backend.nodes(names), site.health.drain_cap_fraction)
        if not dry_run:
            with Store.for_site(site) as store:
                factions.apply(actions, backend, store, why=reason)
    down = _unreachable_rows(got)
    if as_json:
        print_json({"drift": [d.as_dict() for d in diffs], "unreachable": [{"node": n, "error": e} for n, e in down],
                    "actions": [a.as_dict() for a in actions], "dry_run": dry_run})
    else:
        if diffs:
            console.print(table(None, ["nodes", "fact", "has", "wanted", "from"],
                                [(d.hostlist, d.fact, _short(d.have), _short(d.want),
                                  "baseline" if d.source == "baseline" else "fleet's most common") for d in diffs]))
        else:
            console.print(f"no drift on {len(got) - len(down)} node(s)")
        # nodes that agree on one line (clush-style), as the drift rows are; --json stays per node
        for g in fold((n, neutral(e, n)) for n, e in down):
            console.print(f"[red]{escape(g.hostlist)}: {escape(g.named(g.key))}[/red]")
        shown = [a for a in actions if a.action != "none" or dry_run]
        for g in fold((a.node, (a.action, neutral(a.reason, a.node))) for a in shown):
            console.print(f"{'would ' if dry_run else ''}{g.key[0]} {escape(g.hostlist)}: {escape(g.named(g.key[1]))}")
    if down:
        sys.exit(EXIT_UNREACHABLE)
    if diffs:
        sys.exit(EXIT_PROBLEMS)


def _short(v: str) -> str:
    return v[:12] if len(v) == 64 else v


@fleet.command(context_settings={"ignore_unknown_options": True})
@click.argument("nodes")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 86400), default=None,
              help="Time limit per node in seconds (default fleet.command_timeout_s).")
@reason_option("fleet run")
@site_option
@json_option
def run(nodes, command, timeout_s, reason, site_file, as_json) -> None:
    """Run COMMAND on NODES (`slurmadm fleet run 'b200-[001-004]' -- uname -r`); identical
    outputs folded together as clush -b does. Exit 1 when a node's command failed, 3 when a node
    was unreachable or timed out. Audited."""
    site = get_site(site_file)
    names = _nodes(site, nodes)
    line = " ".join(command)
    with Store.for_site(site) as store:
        store.audit("fleet.run", compress(names), reason, command=line, timeout_s=timeout_s)
        replies = fleetmod.run(site, names, line, timeout=timeout_s)
        store.audit("fleet.run.done", compress(names), reason, command=line,
                    exits={r.node: r.exit for r in replies},
                    failed=compress([r.node for r in replies if not r.ok]))
    groups = fleetmod.fold(replies)
    if as_json:
        print_json({"command": line, "groups": [g.as_dict() for g in groups],
                    "nodes": [r.as_dict() for r in replies]})
    else:
        for g in groups:
            head = f"{g.hostlist} ({len(g.nodes)})"
            status = f"error: {g.error}" if g.error else f"exit {g.exit}"
            style = "green" if g.exit == 0 and not g.error else "red"
            console.print(f"[bold]---------------- {escape(head)} [{style}]{escape(status)}[/{style}][/bold]")
            if g.output:
                console.print(escape(g.output.rstrip("\n")))
    if any(r.exit is None for r in replies):
        sys.exit(EXIT_UNREACHABLE)
    if any(r.exit != 0 for r in replies):
        sys.exit(EXIT_PROBLEMS)


class _RolloutGroup(Group):
    """`fleet rollout PLAN` runs a plan; `fleet rollout status` shows rollouts."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["start", *args]
        return super().parse_args(ctx, args)


@fleet.group(cls=_RolloutGroup)
def rollout() -> None:
    """Canary rollouts: `slurmadm fleet rollout PLAN [--dry-run]`, `slurmadm fleet rollout status`."""


@rollout.command("start")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--reservation", default=None, metavar="NAME",
              help="Use this active maintenance reservation (its nodes) instead of draining.")
@click.option("--restart", is_flag=True, help="Forget the stored progress of this plan and start over.")
@dry_run_option
@reason_option("software rollout")
@site_option
@json_option
def rollout_start(plan_file, reservation, restart, dry_run, reason, site_file, as_json) -> None:
    """Roll PLAN out: canary nodes, then waves; stop when more than max_failed_fraction fail.
    Re-running after an interruption continues where it stopped. Exit 1 when it stopped or a
    node failed."""
    from ..files import exclusive_lock
    from ..fleet import rollout as ro
    from ..slurm import get_backend

    site = get_site(site_file)
    plan, sha = ro.load_plan(plan_file)
    if reservation is not None and not reservation.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"--reservation: {reservation!r} is not a reservation name")
    opts = ro.Options(reservation=reservation, restart=restart)
    with Store.for_site(site) as store:
        if dry_run:
            r = ro.Rollout(site, plan, sha, backend=None, remote=None, store=store, options=opts)
            plan_view = r.dry_run()
            if as_json:
                print_json(plan_view)
                return
            console.print(f"rollout [bold]{escape(plan.name)}[/bold] (dry run, nothing changed): "
                          f"hold by {plan_view['hold']}, stop after more than {plan_view['max_failed']} failure(s)")
            console.print(table(None, ["wave", "nodes", "count"],
                                [(w["wave"], w["nodes"], w["count"]) for w in plan_view["waves"]]))
            for i, cmd in enumerate(plan_view["steps"], 1):
                console.print(f"step {i}: {escape(cmd)}")
            if plan.reboot:
                console.print(f"reboot: {escape(plan_view['reboot_command'])}")
            if plan.expect:
                console.print("expect: " + ", ".join(f"{k}={v}" for k, v in plan.expect.items()))
            if plan.health_command:
                console.print(f"health: {escape(plan.health_command)}")
            return
        lock = Path(str(site.store.path) + ".rollout.lock")
        with exclusive_lock(lock, lambda holder: f"another rollout is running ({holder})"):
            store.audit("fleet.rollout.run", plan.name, reason, plan=str(plan_file), restart=restart,
                        reservation=reservation)
            remote = fleetmod.remote_for(site)
            try:
                r = ro.Rollout(site, plan, sha, backend=get_backend(), remote=remote, store=store, options=opts,
                               progress=progress)
                result = r.run()
            finally:
                remote.close()
    if as_json:
        print_json(result.as_dict())
    else:
        _show_rollout(result.name, result.state, result.detail, list(result.nodes.values()))
    if result.state != "done":
        sys.exit(EXIT_PROBLEMS)


def _show_rollout(name, state, detail, nodes) -> None:
    style = {"done": "green", "running": "yellow"}.get(state, "red")
    console.print(f"rollout [bold]{escape(name)}[/bold]: [{style}]{state}[/{style}]"
                  + (f" ({escape(detail)})" if detail else ""))
    groups: dict[tuple, list[str]] = {}
    for s in nodes:
        groups.setdefault((s.wave, s.phase, s.detail if s.phase in ("failed", "skipped") else ""), []).append(s.node)
    console.print(table(None, ["wave", "nodes", "phase", "detail"],
                        [("canary" if w == 0 else w, compress(ns), p, escape(d))
                         for (w, p, d), ns in sorted(groups.items())]))


@rollout.command("status")
@click.argument("name", required=False)
@site_option
@json_option
def rollout_status(name, site_file, as_json) -> None:
    """The rollouts in the store (or one), with each node's phase."""
    from ..fleet import rollout as ro

    site = get_site(site_file)
    with Store.for_site(site) as store:
        found = ro.status(store, name)
    if name and not found:
        raise UsageError(f"no rollout named {name!r} in {site.store.path}")
    show_rollouts(found, as_json, "no rollouts")


def show_rollouts(found: list, as_json: bool, none_text: str) -> None:
    """Rollout statuses (fleet.rollout.status) as JSON, or each with its nodes' phases."""
    if as_json:
        print_json({"rollouts": [s.as_dict() for s in found]})
        return
    if not found:
        console.print(none_text)
    for s in found:
        _show_rollout(s.name, s.state, s.detail, s.nodes)
