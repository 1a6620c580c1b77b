"""`slurmadm jobs`: abnormal workloads (see slurmadm/jobs/)."""

from __future__ import annotations

import time

import click
from rich.markup import escape

from .common import (
    Group,
    dry_run_option,
    get_site,
    json_option,
    print_json,
    reason_option,
    site_option,
    warn,
)
from .common import markup_console as console  # this module escapes every value itself
from .common import markup_table as table


@click.group(cls=Group)
def jobs() -> None:
    """Running jobs that waste GPUs."""


@jobs.command("idle")
@site_option
@json_option
@click.option("--act", is_flag=True, help="Carry out the site's policy (monitor.idle_action): mail, then cancel.")
@dry_run_option
@reason_option("idle GPUs (slurmadm jobs idle)")
@click.option("--prometheus", metavar="URL", help="Default: monitor.prometheus_url.")
def idle(site_file: str | None, as_json: bool, act: bool, dry_run: bool, reason: str, prometheus: str | None) -> None:
    """Jobs holding GPUs at (near) zero utilisation past monitor.idle_minutes; GPUs used without
    an allocation. Exit 1 when any are found."""
    from .. import jobs as capability
    from ..store import Store

    site = get_site(site_file)
    url = prometheus or site.monitor.prometheus_url
    findings = capability.find(site, capability.PrometheusMetrics(url), capability.SqueueFacts())
    problems: list[str] = []
    with Store.for_site(site) as store:
        capability.plan(site, findings, capability.warned_reader(store), time.time())
        if not act:
            for j in findings.jobs:
                if j.action in ("mail", "cancel"):
                    j.why = f"would {j.action} with --act: {j.why}"
        elif not dry_run:
            problems = capability.act(site, findings, store, capability.SlurmActuator(site.monitor.mail_command),
                                      reason=reason)
    if as_json:
        print_json({"jobs": [j.to_json() for j in findings.jobs],
                    "unallocated": [u.__dict__ for u in findings.unallocated], "problems": problems,
                    "policy": site.monitor.idle_action, "idle_minutes": site.monitor.idle_minutes})
    else:
        rows = [(j.job_id, escape(j.user), escape(j.account), j.gpus, ",".join(j.nodes), f"{j.idle_minutes:.1f}",
                 "-" if j.mean_util_percent is None else f"{j.mean_util_percent:.1f}", j.action, escape(j.why))
                for j in findings.jobs]
        console.print(table(f"jobs with idle GPUs (over {site.monitor.idle_minutes:g} min, policy "
                            f"{site.monitor.idle_action})", ["job", "user", "account", "GPUs", "nodes",
                                                             "minutes idle", "mean util %", "action", "why"], rows))
        for u in findings.unallocated:
            console.print(f"[red]GPU used without an allocation:[/red] {u.node} GPU{u.gpu}")
        for p in problems:
            warn(p)
    raise SystemExit(1 if findings.jobs or findings.unallocated else 0)


@jobs.command("failures")
@site_option
@json_option
@click.option("--since", default="24h", show_default=True, help="Runs that ended since a date (2026-11-01) or an age (24h, 7d).")
@click.option("--project", help="Only this project (Slurm account).")
@click.option("--user", help="Only this user's runs.")
def failures(site_file: str | None, as_json: bool, since: str, project: str | None, user: str | None) -> None:
    """Every job run that ended NODE_FAIL, FAILED, OUT_OF_MEMORY, REQUEUED or cancelled by the
    system, with its verdict: infrastructure (a node signal slurmadm saw within 10 min before
    or 5 min after the run's end), user (no node signal), or unknown (the store has no record
    of a node of the run). Exit 1 when any run failed for infrastructure."""
    from ..jobs import failures as capability
    from .audit import parse_since

    site = get_site(site_file)
    since_ts = parse_since(since)
    runs, attributed = capability.collect(site, since_ts)
    shown = [a for a in capability.select(attributed, project=project, user=user)
             if a.run.end is not None and a.run.end >= since_ts]
    total = sum(r.gpu_hours for r in runs if (project is None or r.account == project)
                and (user is None or r.user == user))
    if as_json:
        print_json({"since": since_ts, "runs": len(runs), "gpu_hours": round(total, 3),
                    "summary": capability.summary(shown), "failures": [a.to_json() for a in shown]})
    else:
        rows = [(a.run.job_id, escape(a.run.user), escape(a.run.account), a.run.state, escape(a.run.nodes),
                 f"{a.run.gpu_hours:.2f}", escape(a.line)) for a in shown]
        console.print(table(f"failed job runs since {since}", ["job", "user", "project", "state", "nodes", "GPU-h",
                                                               "verdict"], rows))
        summ = capability.summary(shown)
        parts = [f"{v}: {x['runs']} runs, {x['gpu_hours']:.2f} GPU-h" for v, x in summ.items()]
        console.print(escape(f"{len(shown)} failed runs of {len(runs)} ({total:.2f} GPU-h in all)"
                             + (f"; {'; '.join(parts)}" if parts else "")), highlight=False)
    raise SystemExit(1 if any(a.verdict == "infrastructure" for a in shown) else 0)
