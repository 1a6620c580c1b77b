"""`slurmadm fleet ...`: every node's software stack over SSH (slurmadm/fleet/): facts, drift
against the baseline, commands on many nodes, canary rollouts."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from .. import fleet as fleetmod
from ..errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, UsageError
from ..hostlist import compress, expand
from ..store import Store
from .common import Group, console, dry_run_option, get_site, json_option, print_json, progress, reason_option
from .common import site_option, table, warn, when


@click.group(cls=Group)
def fleet() -> None:
    """One software stack on every node: facts, drift, commands, canary rollouts (over SSH)."""


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
@site_option
@json_option
def facts(nodes, refresh, site_file, as_json) -> None:
    """Each node's software facts (OS image, kernel, driver, CUDA, NCCL, cuDNN, OFED, MPI,
    container runtimes, fabric manager, VBIOS, file hashes, kernel command line), stored with
    their time. Exit 3 when a node could not be reached."""
    site = get_site(site_file)
    names = _nodes(site, nodes)
    got = fleetmod.facts(site, names, refresh=refresh)
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
        for n, e in down:
            console.print(f"[red]{n}: {escape(e)}[/red]")
        for a in actions:
            if a.action != "none" or dry_run:
                console.print(f"{'would ' if dry_run else ''}{a.action} {a.node}: {escape(a.reason)}")
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
