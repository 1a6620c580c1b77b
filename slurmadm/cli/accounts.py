"""`slurmadm accounts plan|apply|report` (see slurmadm/accounts/)."""

from __future__ import annotations

import csv
import datetime as dt
import sys

import click

from ..accounts import (
    ApplyResult,
    Op,
    Plan,
    apply_site,
    mark_blocked,
    plan_for,
)
from ..accounts.apply import ENFORCE_WAIT_S
from ..accounts.report import (
    COLUMNS,
    GPU_NOT_TRACKED,
    ORG_COLUMNS,
    build_full_report,
    organization_table,
    project_table,
)
from ..errors import EXIT_PROBLEMS, SlurmadmError
from ..slurm.accounting import JobReader, Sacctmgr
from ..store import Store
from .audit import parse_since
from .common import (
    Group,
    console,
    dry_run_option,
    get_site,
    info,
    json_option,
    print_json,
    reason_option,
    site_option,
    table,
    warn,
)

SHOW_AT_MOST = 200  # plan rows printed for people; --json always has all


@click.group(cls=Group)
def accounts() -> None:
    """GPU quotas, budgets, fairshare and QOS, kept in slurmdbd.

    Per-project GPU quotas, budgets, fairshare and QOS from site.toml, kept in slurmdbd.

    `plan` shows what differs, `apply` makes slurmdbd match (deletions only with --prune),
    `report` shows quota, GPUs in use, GPU-hours used and left, fairshare and members.
    """


def _plan_rows(ops: list[Op]) -> list[tuple]:
    rows = []
    for i, op in enumerate(ops[:SHOW_AT_MOST], 1):
        action = op.kind
        if op.blocked:
            action += f" (blocked: {op.blocked})"
        elif op.is_delete:
            action += " (--prune)"
        rows.append((i, action, op.target, op.describe(sep="\n")))
    return rows


def _print_plan(plan: Plan, title: str) -> None:
    if not plan:
        console.print(f"slurmdbd matches the site (cluster {plan.cluster}): nothing to do")
        return
    console.print(table(title, ["#", "action", "target", "change"], _plan_rows(plan.ops)))
    if len(plan.ops) > SHOW_AT_MOST:
        console.print(f"... and {len(plan.ops) - SHOW_AT_MOST} more (--json lists all)")
    counts = ", ".join(f"{n} {kind}" for kind, n in plan.counts().items())
    console.print(f"{len(plan.ops)} change(s): {counts}")


@accounts.command("plan")
@site_option
@json_option
@click.option("--check", is_flag=True, help="Exit 1 when the plan is not empty (for cron and CI).")
def plan_cmd(site_file, as_json, check) -> None:
    """Show how slurmdbd differs from the site, in the order apply would change it."""
    site = get_site(site_file)
    sacctmgr = Sacctmgr(site.cluster.name)
    _want, have, plan = plan_for(site, sacctmgr)
    if any(op.is_delete for op in plan.ops):
        try:  # mark deletions that jobs would block; the plan stands without it
            plan = mark_blocked(plan, have, JobReader().active_jobs())
        except SlurmadmError as exc:
            warn(f"cannot check jobs for deletions ({exc}); apply --prune checks again")
    if as_json:
        print_json(plan.to_json())
    else:
        _print_plan(plan, f"accounts plan for cluster {plan.cluster}")
    if check and plan:
        sys.exit(EXIT_PROBLEMS)


def _print_result(result: ApplyResult) -> None:
    if result.done:
        counts: dict[str, int] = {}
        for op in result.done:
            counts[op.kind] = counts.get(op.kind, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        console.print(f"applied {len(result.done)} change(s) in {result.calls} sacctmgr call(s), "
                      f"{result.seconds:.1f} s: {summary}")
        console.print(f"backup: {', '.join(result.backups)}")
    else:
        console.print(f"slurmdbd matches the site (cluster {result.plan.cluster}): nothing applied")
    prune = [op for op in result.skipped if op.is_delete and not op.blocked]
    blocked = [op for op in result.skipped if op.blocked]
    if prune:
        warn(f"{len(prune)} deletion(s) not applied (use --prune): "
             + ", ".join(op.target for op in prune[:10]) + (" ..." if len(prune) > 10 else ""))
    for op in blocked:
        warn(f"not deleted: {op.target}: {op.blocked}")


@accounts.command("apply")
@site_option
@json_option
@dry_run_option
@reason_option("site.toml accounts")
@click.option("--prune", is_flag=True,
              help="Also delete accounts, users and QOS the site no longer declares (never ones with jobs).")
def apply_cmd(site_file, as_json, dry_run, reason, prune) -> None:
    """Make slurmdbd match the site: back up, apply in batches, re-read and confirm."""
    site = get_site(site_file)
    sacctmgr = Sacctmgr(site.cluster.name)
    if dry_run:
        _want, have, plan = plan_for(site, sacctmgr, jobs=JobReader() if prune else None)
        if as_json:
            print_json({**plan.to_json(), "dry_run": True, "prune": prune,
                        "would_apply": len(plan.runnable(prune))})
        else:
            _print_plan(plan, f"accounts apply --dry-run for cluster {plan.cluster} (nothing changed)")
            if not prune and any(op.is_delete for op in plan.ops):
                info("deletions are listed but would not run without --prune")
        return
    with Store.for_site(site) as store:
        result = apply_site(site, sacctmgr, store, prune=prune, reason=reason, jobs=JobReader() if prune else None,
                       progress=None if as_json else info)
    if as_json:
        print_json(result.to_json())
    else:
        _print_result(result)
    if result.not_enforced:
        warn(f"slurmdbd has it, but slurmctld does not enforce it yet (scontrol show assoc_mgr, after "
             f"{ENFORCE_WAIT_S:.0f} s): {', '.join(result.not_enforced[:10])}"
             + (" ..." if len(result.not_enforced) > 10 else "")
             + "; jobs using it are refused until it arrives (re-run `accounts apply` to check)")
        sys.exit(EXIT_PROBLEMS)


@accounts.command("report")
@site_option
@json_option
@click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout (projects, then organisations).")
@click.option("--since", help="Also the GPU-hours jobs ran since a date (2026-11-01) or an age (7d), from "
                              "sacct: raw hours, every run of a requeued job, no UsageFactor, no decay.")
def report_cmd(site_file, as_json, as_csv, since) -> None:
    """Per project and organisation: GPU quota, GPUs in use now, the GPU-hour budget (its own or
    the tightest one inherited, named), GPU-hours charged against it, what running jobs still
    hold, what is left for new jobs, fairshare, members and coordinators.

    \b
    charged  what Slurm counts against the budget (sshare GrpTRESRaw): GPU-hours x the QOS
             UsageFactor, decayed as accounting.budget_mode says, in whole minutes
    running  GPU-hours running jobs still hold until their time limits (sshare TRESRunMins)
    left     budget - charged - running: what AccountingStorageEnforce=safe lets new jobs use
    ran      (--since) GPU-hours jobs actually ran in the window (sacct), raw
    lost     (--since) GPU-hours of runs that ended in the window and failed for the
             infrastructure (`jobs failures`' verdict): what a site credits back"""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other")
    site = get_site(site_file)
    since_ts = parse_since(since)
    state = Sacctmgr(site.cluster.name).read_state()
    jobs = JobReader()
    minutes = None
    if since_ts is not None:
        start = dt.datetime.fromtimestamp(since_ts).strftime("%Y-%m-%dT%H:%M:%S")
        minutes = jobs.gpu_minutes_since(start)
    tracked = jobs.gpu_tracked()
    rows, orgs = build_full_report(site, state, jobs.running_gpus(), jobs.shares(), minutes, tracked)
    if since_ts is not None and tracked is not False:
        from ..accounts.report import add_lost
        from ..jobs import failures

        _runs, attributed = failures.collect(site, since_ts)
        add_lost(site, rows, orgs, failures.lost_by_account(
            [a for a in attributed if a.run.end is not None and a.run.end >= since_ts]))
    if as_json:
        print_json({"cluster": site.cluster.name, "since": since, "gpu_tres_tracked": tracked,
                    "warnings": [GPU_NOT_TRACKED] if tracked is False else [],
                    "projects": [r.to_json() for r in rows], "organizations": [o.to_json() for o in orgs]})
        return
    if tracked is False:
        click.echo(f"warning: {GPU_NOT_TRACKED}", err=True)
    if as_csv:
        writer = csv.writer(sys.stdout)
        for columns, items in ((COLUMNS, rows), (ORG_COLUMNS, orgs)):
            writer.writerow(columns)
            for r in items:
                d = r.to_json()
                writer.writerow([" ".join(d[c]) if c in ("members", "coordinators")
                                 else ("" if d[c] is None else d[c]) for c in columns])
        return

    cols, out = project_table(rows, since)
    console.print(table(f"accounts report for cluster {site.cluster.name}", cols, out))
    ocols, oout = organization_table(orgs, since)
    console.print(table("organisations", ocols, oout))
    console.print("charged: GPU-h x QOS UsageFactor, decayed (sshare GrpTRESRaw), what budgets count; "
                  "running: held by running jobs until their time limits; left: budget - charged - running"
                  + ("; ran: raw GPU-h from sacct; lost: GPU-h of runs failed for the infrastructure"
                     if since else ""), highlight=False)
