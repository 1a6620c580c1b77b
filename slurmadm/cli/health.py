"""`slurmadm health ...`: GPU node health checks (see slurmadm/health/).

Slurm runs the same code through the lean hook (`python -m slurmadm.health prolog`, see
prolog_epilog/*.sh); these commands are for people and scripts.
"""

from __future__ import annotations

import time

import click

from ..errors import SlurmadmError, UsageError
from ..health import config as hconfig
from ..health import engine, sitecheck  # noqa: F401  (sitecheck registers the check-id validation)
from ..health import status as hstatus
from ..health.checks import BY_ID, CHECKS, SETTINGS, policy
from ..health.hook import local_node
from ..store import read
from .audit import parse_since
from .common import (Group, console, dry_run_option, get_site, json_option, print_json, say, site_option, styled, table,
                     warn, when)

STATUS_STYLE = {"pass": "green", "skip": "dim", "warn": "yellow", "fail": "red", "error": "magenta"}


def status_cell(status: str):
    return styled(status, STATUS_STYLE.get(status, ""))


@click.group(cls=Group)
def health() -> None:
    """GPU node health checks and their history.

    GPU health checks: prolog, epilog, periodic (HealthCheckProgram), by hand, and their history."""


def _node_option(fn):
    return click.option("--node", help="Act as this Slurm node (default: $SLURMD_NODENAME, then the host name).")(fn)


def _when_span(oldest: float, newest: float) -> str:
    return when(newest) if when(oldest) == when(newest) else f"{when(oldest)} .."


def _show(report: engine.Report) -> None:
    rows = [(r.check_id, status_cell(r.status), r.severity, r.action, r.detail, f"{r.duration_ms:.1f}")
            for r in report.results]
    console.print(table(f"{report.context} on {report.node} ({report.duration_ms:.0f} ms)",
                        ["check", "status", "severity", "action", "detail", "ms"], rows))
    if report.plan.action != "none" or report.plan.reason != "clean":
        done = "" if report.applied or report.plan.action == "none" else " (not applied)"
        say(f"{report.plan.action}{done}: {report.plan.reason}")
    for p in report.problems:
        say(("warning:", "yellow"), " ", p)


def _execute(site_file, node, context, checks, dry_run, as_json) -> None:
    started = time.monotonic()
    cfg = hconfig.load(local_node(node), site_file)  # sitecheck: imported above
    only = [c.strip() for c in checks.split(",") if c.strip()] if checks else None
    report = engine.execute(cfg, context, only=only, act=not dry_run, started=started)
    if as_json:
        print_json(report.to_dict())
    else:
        _show(report)
    engine.leave(report.exit_code)


def _context_command(context: str, help_text: str):
    @health.command(context, help=help_text)
    @site_option
    @_node_option
    @dry_run_option
    @json_option
    def cmd(site_file, node, dry_run, as_json) -> None:
        _execute(site_file, node, context, None, dry_run, as_json)

    return cmd


_context_command("prolog", "The prolog's checks (fast ones; NCCL when stale). Exit 1: the node must not take the job.")
_context_command("epilog", "The epilog's checks (adds leftover GPU processes, NCCL when stale).")
_context_command("periodic", "HealthCheckProgram: every fast check; resumes slurmadm's drains after clean runs.")


@health.command("run")
@site_option
@_node_option
@click.option("--checks", help="Comma-separated check ids (default: every check of the `run` context).")
@dry_run_option
@json_option
def run_cmd(site_file, node, checks, dry_run, as_json) -> None:
    """Run checks now on this node; drains per the site's policy unless --dry-run. Exit 1 on any
    failure or check that could not run."""
    _execute(site_file, node, "run", checks, dry_run, as_json)


@health.command("checks")
@site_option
@json_option
def checks_cmd(site_file, as_json) -> None:
    """The action table: every check id with its severity, contexts and actions for this site."""
    site = get_site(site_file)
    cfg = hconfig.from_site(site, site.node_names[0], site_path="", site_sha256="")
    rows = []
    for spec in CHECKS:
        p = policy(spec, cfg)
        rows.append({"id": spec.id, "title": spec.title, "severity": p.severity, "contexts": list(p.contexts),
                     "on_fail": p.on_fail, "on_error": p.on_error, "timeout_s": p.timeout_s,
                     "settings": list(SETTINGS.get(spec.id, ()))})
    if as_json:
        print_json(rows)
        return
    console.print(table(None, ["check", "severity", "contexts", "on fail", "on error", "limit s", "what"],
                        [(r["id"], r["severity"], ", ".join(r["contexts"]) or "-", r["on_fail"], r["on_error"],
                          f"{r['timeout_s']:g}", r["title"]) for r in rows],
                        optional=["limit s", "on error", "severity"]))


def slurm_nodes():
    """The nodes as Slurm has them now (for their drain reasons), through the Slurm adapter."""
    from ..slurm import get_backend

    return get_backend().nodes()


def _drained(site, wanted: set[str] | None) -> list | str:
    """Drained or down nodes of the site (optionally only `wanted`), or why Slurm could not say."""
    try:
        nodes = slurm_nodes()
    except SlurmadmError as exc:
        return str(exc)
    names = set(site.node_names)
    return [n for n in nodes if n.name in names and (wanted is None or n.name in wanted)
            and (n.drained or n.state == "DOWN")]


@health.command("status")
@site_option
@json_option
@click.option("--nodes", help="Only these nodes (hostlist).")
def status_cmd(site_file, as_json, nodes) -> None:
    """The latest result of every check on every node (from the store), then each drained node
    with its whole drain reason as Slurm holds it (`sinfo -R` shows only 20 characters). Nodes
    that agree share one row (a hostlist): each problem with the nodes that have it, then the
    nodes whose checks all pass; `when` is the newest result, or the oldest then `..` where a
    row's results differ in time. --json stays one row per node and check. A node whose health
    hooks cannot load the site shows a `hook` row (health enforcement is off there).
    Exit 1 if any check is failing."""
    from ..site import require_nodes

    site = get_site(site_file)
    wanted = set(require_nodes(site, nodes)) if nodes else None
    with read.reader(site) as r:
        out = read.latest_results(r, wanted)
        hooks = read.hook_errors(r, wanted)
        silent = read.silent_nodes(r, site)
    # a node whose hooks cannot load the site runs every job unchecked: a row of its own, first
    out = [{"host": None, "id": None, "ts": e["ts"], "run_id": "hook-error", "node": e["node"], "context": e["context"],
            "check_id": "hook", "status": "error", "severity": "critical",
            "detail": f"health enforcement off ({e['count']} hook run(s)): {e['error']}", "value": None,
            "duration_ms": 0.0} for e in hooks] + out
    silent = {n: last for n, last in silent.items() if wanted is None or n in wanted}
    for line in read.silent_lines(silent, site.store.stale_after_minutes, when):
        warn(line)
    drained = _drained(site, wanted)
    reasons = {n.name: n.reason for n in drained} if isinstance(drained, list) else None
    for r in out:  # the node's drain reason now ("" when not drained; None when Slurm did not answer)
        r["slurm_reason"] = None if reasons is None else reasons.get(r["node"], "")
    if as_json:
        print_json(out)
    else:
        # nodes that agree are one row (clush-style hostlist); --json above stays per node
        console.print(table(None, ["nodes", "n", "check", "status", "context", "when", "detail"],
                            [(g["nodes"], g["count"], g["check_id"], status_cell(g["status"]), ",".join(g["contexts"]),
                              _when_span(g["oldest"], g["newest"]), g["detail"]) for g in hstatus.fold_results(out)],
                            wrap=["nodes", "detail"], optional=("n", "context", "when")))
        if isinstance(drained, str):
            say(("drain reasons: ", "yellow"), f"Slurm did not answer ({drained})")
        elif drained:
            console.print(table("drained nodes (whole reason)", ["nodes", "state", "by", "reason"],
                                [(g["nodes"], g["state"], g["by"],
                                  styled(g["reason"], "bold") if g["reason"].startswith("slurmadm:") else g["reason"])
                                 for g in hstatus.fold_drained(drained)], wrap=["nodes", "reason"]))
    if any(r["status"] in ("fail", "error") for r in out):
        raise SystemExit(1)


@health.command("history")
@site_option
@json_option
@click.option("--node", help="Only this node.")
@click.option("--check", "check_id", help="Only this check id.")
@click.option("--status", type=click.Choice(["pass", "fail", "warn", "error", "skip"]), help="Only this status.")
@click.option("--context", type=click.Choice(["prolog", "epilog", "periodic", "run"]), help="Only this context.")
@click.option("--since", help="Only results since a date (2026-11-01) or an age (24h, 7d).")
@click.option("--limit", type=click.IntRange(1, 100000), default=200, show_default=True)
def history_cmd(site_file, as_json, node, check_id, status, context, since, limit) -> None:
    """Past check results, newest first (every node's, from the central store when the site has one)."""
    site = get_site(site_file)
    if check_id and check_id not in BY_ID:
        raise UsageError(f"--check: unknown check id {check_id!r} (known: {', '.join(BY_ID)})")
    with read.reader(site) as r:
        out = read.history(r, node=node, check_id=check_id, status=status, context=context,
                           since=parse_since(since), limit=limit)
    if as_json:
        print_json(out)
        return
    console.print(table(None, ["when", "node", "context", "check", "status", "detail"],
                        [(when(r["ts"]), r["node"], r["context"], r["check_id"],
                          status_cell(r["status"]), r["detail"]) for r in out]))


WHAT_IF_ROWS = 10  # nodes listed per --what-if for people (the worst first); --json has them all


@health.command("observe")
@site_option
@json_option
@click.option("--check", "check_ids", multiple=True, metavar="ID",
              help="Report this check (repeatable; default: every check the site runs with on_fail = \"observe\").")
@click.option("--since", default="7d", show_default=True, help="Results since a date (2026-11-01) or an age (24h, 7d).")
@click.option("--what-if", "what_ifs", multiple=True, metavar="KEY=VALUE",
              help="Replay a threshold on the values the runs stored instead (repeatable): max_gpu_temp_c, "
                   "ecc_corrected_volatile_max or nccl_busbw_floor_gbps, for every GPU model.")
def observe_cmd(site_file, as_json, check_ids, since, what_ifs) -> None:
    """What the checks in observe mode would have drained. A check set to
    `[health.checks.<id>] on_fail = "observe"` runs and is recorded everywhere but drains nothing:
    this says, per check, which nodes failed it since --since (they would have been drained), how
    often, when last and why, and whether that is more of the fleet than the drain breaker allows
    (a false positive to fix before you promote it to "drain"). Errors (the check could not run)
    are counted apart. With --what-if, a new threshold is replayed on the values the fleet's runs
    stored (no observe period needed): the nodes it would have drained, beside those the current
    threshold drains. Reads the store only."""
    from ..health import observe

    try:
        proposals = [observe.parse_what_if(w) for w in what_ifs]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    site = get_site(site_file)
    unknown = [c for c in check_ids if c not in BY_ID]
    if unknown:
        raise UsageError(f"--check: unknown check id(s) {', '.join(unknown)} (known: {', '.join(BY_ID)})")
    if check_ids and proposals:
        raise UsageError("--what-if names its check by its threshold: leave out --check")
    start = parse_since(since)
    if start is None:
        raise UsageError("--since: a date (2026-11-01) or an age (24h, 7d)")
    if proposals:
        with read.reader(site) as r:
            replays = [observe.what_if(r, site, key, value, since=start) for key, value in proposals]
        if as_json:
            print_json(replays)
            return
        for row in replays:
            say((row["key"], "bold"), f" since {when(row['since'])}: ",
                (observe.what_if_verdict(row), "red" if row["over_breaker"] else ""))
            say((f"replays {row['scope']}", "dim"))
            shown = row["nodes"][:WHAT_IF_ROWS]
            if shown:
                console.print(table(None, ["node", "runs", "would fail", "fail now", "worst", "last over"],
                                    [(n["node"], str(n["runs"]), str(n["would_fail"]), str(n["fail_now"]),
                                      f"{n['worst']:g}", when(n["last"]) if n["last"] else "-") for n in shown],
                                    optional=("fail now",)))
            if len(row["nodes"]) > len(shown):
                say((f"... and {len(row['nodes']) - len(shown)} more node(s) (--json lists every one)", "dim"))
        return
    checks = list(dict.fromkeys(check_ids)) or observe.observed(site)
    if not checks:
        if as_json:
            print_json([])
        else:
            say("no check is in observe mode: set [health.checks.<id>] on_fail = \"observe\" in the site file, "
                "or name one with --check")
        return
    with read.reader(site) as r:
        rows = observe.report(r, site, checks, since=start)
    if as_json:
        print_json(rows)
        return
    for row in rows:
        say((row["check_id"], "bold"), f" (on_fail {row['on_fail']}) since {when(row['since'])}: ",
            (observe.verdict(row), "red" if row["over_breaker"] else ""))
        if row["nodes"]:  # nodes that agree share a row; --json stays per node
            console.print(table(None, ["nodes", "n", "fails", "errors", "last", "detail"],
                                [(g["nodes"], str(g["count"]), str(g["fails"]), str(g["errors"]),
                                  when(g["last"]) if g["last"] else "-", g["detail"]) for g in observe.fold(row["nodes"])],
                                wrap=["nodes", "detail"], optional=("n", "errors")))


@health.command("calibrate")
@site_option
@json_option
@click.option("--model", help="GPU model (default: every model with NCCL results).")
@click.option("--since", default="30d", show_default=True, help="Use results since a date or an age (24h, 30d).")
@click.option("--margin", type=click.FloatRange(0.05, 0.9), default=0.15, show_default=True,
              help="Suggested floor = fleet median x (1 - margin).")
def calibrate_cmd(site_file, as_json, model, since, margin) -> None:
    """The fleet's NCCL all-reduce bus bandwidth: median per GPU model of each node's latest passing
    result (health checks and burn-in sweeps; a node below the floor is no yardstick) and a
    suggested `nccl_busbw_floor_gbps`. Changes nothing."""
    from ..health.calibrate import calibrate

    site = get_site(site_file)
    models = {site.node_profile(n).gpus.model for n in site.node_names}
    if model and model not in models:
        raise UsageError(f"--model: no node has GPU model {model!r} (site has: {', '.join(sorted(models))})")
    with read.reader(site) as r:
        out = calibrate(site, r, parse_since(since), margin, model)
    if as_json:
        print_json(out)
        return
    if not out:
        console.print("no NCCL all-reduce results yet (run `slurmadm burnin run`, or "
                      "`slurmadm health run --checks nccl-allreduce` on idle nodes)")
        raise SystemExit(1)
    console.print(table(None, ["model", "nodes", "from burn-in", "median GB/s", "min", "max", "floor now",
                               "suggested floor"],
                        [(r["model"], r["nodes"], r["from_burnin"], r["median_gbps"], r["min_gbps"], r["max_gbps"],
                          r["current_floor_gbps"], r["suggested_floor_gbps"]) for r in out]))
    for r in out:
        say(f"set [health.models.{r['model']}] nccl_busbw_floor_gbps = {r['suggested_floor_gbps']}")
