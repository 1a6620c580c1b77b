"""`slurmadm config ...`: Slurm's configuration from the site (see slurmadm/config/)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import click

from ..config import apply as apply_mod
from ..config import diff as diff_mod
from ..config import fmt, node, render, resolve_release
from ..config import unit as unit_mod
from ..errors import EXIT_PROBLEMS, UnreachableError, UsageError
from ..files import write_atomic
from ..site import Site, site_path
from .common import (
    install_files,
    Group,
    console,
    dry_run_option,
    get_site,
    info,
    json_option,
    print_json,
    reason_option,
    say,
    site_option,
    table,
)


def release_option(fn):
    return click.option(
        "--release", metavar="X.Y", default=None,
        help="Slurm release to write for (default: slurm.release; 'auto' asks the installed Slurm).",
    )(fn)


def _render(site_file: str | None, release: str | None) -> tuple[Site, tuple[int, int], dict[str, str]]:
    site = get_site(site_file)
    conf = Path(site.slurm.config_dir) / "slurm.conf"
    rel = resolve_release(site, release, env={"SLURM_CONF": str(conf)} if conf.exists() else None)
    return site, rel, render(site, rel, source=str(site_path(site_file)))


def _print_changes(the_plan: diff_mod.Plan, *, show_diff: bool) -> None:
    if show_diff:
        for f in the_plan.files:
            click.echo(f.unified, nl=False)
    rows = [(c.file, c.what, c.action + (f" {'+'.join(c.daemons)}" if c.daemons else ""), c.note)
            for c in the_plan.changes]
    console.print(table(None, ["file", "change", "needs", "note"], rows))


@click.group(cls=Group)
def config() -> None:
    """Slurm's configuration files, written from the site.

    Slurm's configuration (slurm.conf, gres.conf, topology.conf, cgroup.conf) from the site."""


@config.command("render")
@site_option
@release_option
@click.option("--out", "out_dir", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Write the files into DIR instead of printing them.")
@json_option
def render_cmd(site_file, release, out_dir, as_json) -> None:
    """Render the configs (deterministic: the same site gives byte-identical files)."""
    site, rel, files = _render(site_file, release)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write_atomic(out / name, text)
    if as_json:
        print_json({"release": fmt(rel), "site_digest": site.digest, "out": out_dir,
                    "files": {n: {"sha256": hashlib.sha256(t.encode()).hexdigest(), **({} if out_dir else {"text": t})}
                              for n, t in files.items()}})
    elif out_dir:
        for name, text in files.items():
            info(f"wrote {Path(out_dir) / name} ({len(text.splitlines())} lines)")
    else:
        for i, (name, text) in enumerate(files.items()):
            click.echo(("\n" if i else "") + f"==> {name} <==")
            click.echo(text, nl=False)


@config.command("diff")
@site_option
@release_option
@click.option("--against", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Installed configs to compare with (default: slurm.config_dir).")
@json_option
def diff_cmd(site_file, release, against, as_json) -> None:
    """Unified diff of the installed configs against the rendered ones, each change marked as
    needing a daemon restart or only `scontrol reconfigure`. Exit 1 when they differ."""
    site, _, files = _render(site_file, release)
    the_plan = diff_mod.plan(files, against or site.slurm.config_dir)
    if as_json:
        print_json({**the_plan.as_dict(), "diff": {f.name: f.unified for f in the_plan.files}})
    elif not the_plan.files:
        say(("no differences", "green"), f" in {the_plan.target}")
    else:
        _print_changes(the_plan, show_diff=True)
    if the_plan.files:
        click.get_current_context().exit(EXIT_PROBLEMS)


@config.command("apply")
@site_option
@release_option
@dry_run_option
@reason_option("config apply")
@click.option("--target", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Config directory to write (default: slurm.config_dir).")
@json_option
def apply_cmd(site_file, release, dry_run, reason, target, as_json) -> None:
    """Write the rendered configs: backup, atomic rename, one audit event per file, then
    `scontrol reconfigure` when that is enough. Changes that need daemon restarts are listed
    (which daemons, where, in order) but not restarted: the files must reach every node first.
    Exit 3 if the files were written but slurmctld could not be told to reconfigure."""
    site, _, files = _render(site_file, release)
    result = apply_mod.apply(site, files, reason=reason, dry_run=dry_run, target=target)
    the_plan = result.plan
    for line in [] if as_json else result.warnings:  # (--json: under "warnings")
        click.echo(f"slurmadm: warning: {line}", err=True)
    if as_json:
        print_json(result.as_dict(site))
    elif not the_plan.files:
        say(("up to date", "green"), f": {the_plan.target} already holds this site's configs")
    else:
        _print_changes(the_plan, show_diff=dry_run)
        if dry_run:
            say(("dry run", "yellow"), f": nothing written to {the_plan.target}")
        else:
            console.print(f"wrote {', '.join(result.written)} in {the_plan.target}"
                          + (f" (backup: {result.backup})" if result.backup else ""))
            if result.reconfigured:
                say(("scontrol reconfigure", "green"), ": done")
        steps = result.restart_steps(site)
        if steps:
            say(("restart needed", "yellow"), " (not done by slurmadm):")
            for i, step in enumerate(steps, 1):
                console.print(f"  {i}. {step}")
    if result.reconfigure_error:
        raise UnreachableError(f"files written, but `scontrol reconfigure` failed: {result.reconfigure_error}")


@config.command("check-node")
@site_option
@click.option("--node", "node_name", metavar="NAME", default=None,
              help="Which site node this is (default: $SLURMD_NODENAME, then slurmd -C's NodeName).")
@click.option("--timeout", type=click.FloatRange(1, 600), default=20.0, show_default=True,
              help="Seconds allowed for slurmd -C and for NVML each.")
@json_option
def check_node(site_file, node_name, timeout, as_json) -> None:
    """Compare this node (slurmd -C, NVML) with its profile in the site. Exit 1 on a mismatch,
    one line per mismatch."""
    site = get_site(site_file)
    facts = node.read_slurmd(timeout)
    name = node_name or os.environ.get("SLURMD_NODENAME") or facts.node_name
    if name not in site.node_group_of:
        raise UsageError(f"--node: {name!r} is not a node of the site ({site.all_nodes})")
    gpus = node.read_gpus(timeout)
    problems = node.compare(site, name, facts, gpus, node.cpu_sockets())
    if as_json:
        print_json({"node": name, "profile": site.node_group_of[name].profile, "ok": not problems,
                    "mismatches": problems, "gpus": len(gpus), "cpus": facts.cpus,
                    "real_memory": facts.real_memory})
    elif problems:
        for line in problems:
            click.echo(f"{name}: {line}")
    else:
        say(("ok", "green"), f" {name} matches profile {site.node_group_of[name].profile} "
            f"({facts.cpus} CPUs, {len(gpus)} GPUs)")
    if problems:
        click.get_current_context().exit(EXIT_PROBLEMS)


@config.command("slurmd-unit")
@site_option
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              help=f"systemd directory to write into (default {unit_mod.SYSTEMD_DIR}).")
@dry_run_option
@reason_option("slurmd unit ordering")
@json_option
def slurmd_unit(site_file, dest, dry_run, reason, as_json) -> None:
    """Write a slurmd.service drop-in ordering slurmd after slurm.slurmd_after (default
    nvidia-persistenced.service): slurmd exits if gres.conf's /dev/nvidia* do not exist yet.
    Run on every compute node (or ship the file with the node image), then `systemctl daemon-reload`."""
    site = get_site(site_file)
    install_files(site, unit_mod.plan(site, dest), action="config.slurmd-unit", reason=reason, dry_run=dry_run,
                  as_json=as_json, then="systemctl daemon-reload")
