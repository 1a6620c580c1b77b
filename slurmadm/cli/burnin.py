"""`slurmadm burnin ...`: nightly burn-in sweeps that qualify or quarantine nodes (slurmadm/burnin/)."""

from __future__ import annotations

import datetime as dt

import click
from rich.text import Text

from ..burnin import baseline as baselines
from ..burnin import fleet, history, report, schedule
from ..burnin.sweep import Sweep
from ..errors import UsageError
from ..site import site_path
from ..store import Store, read
from .common import (Group, console, dry_run_option, get_site, info, install_files, json_option, paragraph, print_json,
                     progress, reason_option, say, site_option, styled, table, warn)


@click.group(cls=Group)
def burnin() -> None:
    """Burn-in sweeps that qualify or quarantine nodes.

    Burn-in sweeps: health suite, GPU stress and all-reduce tests as Slurm jobs; failed nodes
    drained, re-qualified nodes resumed, a report per sweep."""


@burnin.command()
@site_option
@click.option("--nodes", metavar="HOSTLIST", help="Test these nodes (any time of day) instead of choosing.")
@click.option("--report-dir", type=click.Path(file_okay=False), default=None,
              help="Where the report goes (default: burnin.report_dir of the site).")
@dry_run_option
@json_option
def run(site_file, nodes, report_dir, dry_run, as_json) -> None:
    """Run one sweep. Exit 1 when a node (or link) failed."""
    s = get_site(site_file)
    sweep = Sweep(s, site_file=site_file, report_dir=report_dir, progress=progress)
    if dry_run:
        plan = sweep.dry_run(nodes)
        if as_json:
            print_json(plan)
            return
        _show_selection(plan["selection"])
        for node, why in plan["would_hold"].items():
            console.print(f"would drain {node} for the next sweep: {why}")
        if plan["would_recover"] and any(plan["would_recover"].values()):
            console.print(f"would first clean up after an earlier sweep: {plan['would_recover']}")
        if plan["node_job"]:
            console.print(f"would reserve them ({plan['reservation'] or 'no reservation'}) and run per node:")
            console.print("  " + " ".join(plan["node_job"]), soft_wrap=True)
        console.print("dry run: nothing changed")
        return
    summary = sweep.run(nodes)
    if as_json:
        print_json(summary)
    else:
        _show_summary(summary)
    if summary["exit_code"]:
        raise SystemExit(summary["exit_code"])


def _show_selection(sel: dict) -> None:
    rows = [(n, why, "") for n, why in sel["chosen"].items()] + [(n, "", why) for n, why in sel["skipped"].items()]
    console.print(table(f"selection (window {'open' if sel['in_window'] else 'closed'})",
                        ["node", "taken as", "left out because"], rows))


def _show_summary(s: dict) -> None:
    rows = []
    for n in s["nodes"]:
        verdict = styled(n["verdict"], {"pass": "green", "fail": "red"}.get(n["verdict"], ""))
        why = f"{n['failed_test']}: {n['detail']}" if n["failed_test"] else n["detail"]
        bw = f"{n['busbw_gbps']:.3g}" if n["busbw_gbps"] is not None else ""
        rows.append((n["node"], n["why"], verdict, why, bw, n["action"]))
    console.print(table(f"burn-in sweep {s['sweep_id']}: {s['status']} in {s['duration_s']} s",
                        ["node", "taken as", "verdict", "why", "busbw GB/s", "action"], rows))
    for p in s["pairs"]:
        if p["status"] != "pass":
            info(f"pair {p['a']}+{p['b']} ({p['kind']}, round {p['round']}): {p['status']}: {p['detail']}")
    for link in s["links"]:
        info(Text.assemble(("bad link", "red"), f" {link['a']} <-> {link['b']}: {link['detail']}"))
    if s["pair_note"]:
        info(s["pair_note"])
    skipped = s["selection"]["skipped"]
    if skipped and (len(skipped) <= 10 or not s["nodes"]):
        for node, why in list(skipped.items())[:20]:
            info(f"not tested: {node}: {why}")
    elif skipped:
        info(f"{len(skipped)} node(s) not tested (see the report)")
    for node, held in (s.get("held_for_next") or {}).items():
        info(f"due for burn-in: {node}: {held['why']}: {held['action']}")
    for line in report.warnings(s):
        warn(f"slower: {line}")
    say(("verdict: ", "bold"), report.verdict(s)["text"])
    console.print(f"report: {s['report']}")


@burnin.command()
@site_option
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@json_option
def status(site_file, limit, as_json) -> None:
    """The last sweeps, newest first."""
    s = get_site(site_file)
    with read.reader(s) as r:
        rows = history.sweeps(r, limit=limit)
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no burn-in sweep recorded yet")
        return

    def when(ts):
        return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""

    console.print(table(None, ["sweep", "started", "took", "status", "nodes", "pass", "fail", "skipped", "warn",
                               "straggler"],
                        [(r["id"], when(r["started"]), f"{r['finished'] - r['started']:.0f} s" if r["finished"] else "",
                          r["status"], r["nodes"], r["passed"], r["failed"], r["skipped"],
                          styled(len(r["warnings"]), "yellow") if r["warnings"] else "0",
                          styled(len(r["stragglers"]), "magenta") if r["stragglers"] else "0") for r in rows],
                        wrap=["nodes"]))
    latest = rows[0]
    for line in latest["warnings"]:
        warn(f"sweep {latest['id']}: slower: {line}")
    for node in latest["stragglers"]:
        f = latest["fleet"][node]
        warn(f"sweep {latest['id']}: straggler {node}: {f['worst']} ({f['slow_streak']} sweep(s) in a row)")
    if latest["report"]:
        console.print(f"latest report: {latest['report']}")


@burnin.command("held")
@site_option
@json_option
def held_cmd(site_file, as_json) -> None:
    """Nodes burn-in holds out of service now, from Slurm's drain reasons: a failed test or a
    straggler (each a repair incident), a suspect held for the next sweep's re-test, a busy node
    held for its turn (burnin.due_days). Nodes that agree are one row; --json is one per node."""
    import time

    from ..burnin import held as bheld
    from ..slurm import get_backend

    s = get_site(site_file)
    items = bheld.held(s, get_backend().nodes())
    if as_json:
        print_json([h.as_dict() for h in items])
        return
    if not items:
        console.print("burn-in holds no node")
        return
    say(bheld.summary(items))
    console.print(table(None, ["nodes", "held for", "state", "held", "detail"], bheld.rows(items, time.time()),
                        wrap=["detail"], optional=["state"]))
    for kinds, nxt in bheld.releases(items):
        say(f"{kinds}: released by {nxt}")
    b = s.burnin
    say(f"the sweeps: cron '{b.schedule}' (`slurmadm burnin install-schedule`), in the window "
        f"{b.window_start}-{b.window_end}")


@burnin.command("known-issues")
@site_option
@json_option
def known_issues_cmd(site_file, as_json) -> None:
    """Known defects of the tools burn-in runs, per GPU model and release (each with its public
    report), and what each does on this site: a `dcgmi diag` that hangs is not started, a test
    that fails healthy GPUs only warns. `burnin.ignore_known_issues` turns one off."""
    from ..burnin import known

    s = get_site(site_file)
    items = known.for_site(s)
    if as_json:
        print_json(items)
        return
    console.print(table(None, ["id", "models", "releases", "levels", "effect", "here"], known.rows(items),
                        optional=["levels"]))
    for i in items:
        paragraph(f"{i['id']}: {i['why']}. {i['source']}")
    say(f"(burnin.dcgm_level {s.burnin.dcgm_level}; burnin.ignore_known_issues turns an entry off)")


@burnin.command("install-schedule")
@site_option
@click.option("--cron", "kind", flag_value="cron", default=True, help="A /etc/cron.d entry (default).")
@click.option("--systemd", "kind", flag_value="systemd", help="A systemd service + timer.")
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              help="Directory to write into (default /etc/cron.d or /etc/systemd/system).")
@dry_run_option
@reason_option("nightly burn-in schedule")
@json_option
def install_schedule(site_file, kind, dest, dry_run, reason, as_json) -> None:
    """Write the nightly schedule (burnin.schedule of the site) as cron or systemd files."""
    s = get_site(site_file)
    install_files(s, schedule.plan(s, str(site_path(site_file)), kind=kind, dest=dest),
                  action="burnin.install-schedule", reason=reason, dry_run=dry_run, as_json=as_json,
                  then=f"systemctl daemon-reload && systemctl enable --now {schedule.UNIT}.timer"
                  if kind == "systemd" else None)


@burnin.command("history")
@site_option
@click.argument("node")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True, help="Last N sweeps.")
@json_option
def history_cmd(site_file, node, limit, as_json) -> None:
    """NODE's last sweeps, newest first: verdict, action, and each metric as a share of the fleet
    median (a slow decline shows before it fails)."""
    s = get_site(site_file)
    if node not in s.node_group_of:
        raise UsageError(f"{node}: not a node of the site")
    with read.reader(s) as r:
        rows = history.node_history(r, node, limit=limit)
    if as_json:
        print_json({"node": node, "sweeps": [{**h, "shares": fleet.shares(h["fleet"])} for h in rows]})
        return
    if not rows:
        console.print(f"{node}: no burn-in sweep tested it yet")
        return
    metrics = [m for m in fleet.METRICS if any(m in fleet.shares(h["fleet"]) for h in rows)]
    level_style = {"slow": "red", "warn": "yellow", "ok": "green"}
    out = []
    for h in rows:
        sh = fleet.shares(h["fleet"])
        level = (h["fleet"] or {}).get("level", "")
        out.append([h["sweep_id"], h["verdict"], styled(level, level_style.get(level, "")), h["action"]]
                   + [f"{sh[m] * 100:.0f}%" if m in sh else "" for m in metrics])
    console.print(table(f"{node}: share of the fleet median per sweep", ["sweep", "verdict", "fleet", "action"]
                        + metrics, out))


@burnin.group(cls=Group)
def baseline() -> None:
    """Baselines per hardware profile: the medians of a passed sweep that later sweeps are also
    judged against (a fleet that degrades together)."""


@baseline.command("show")
@site_option
@json_option
def baseline_show(site_file, as_json) -> None:
    """The baselines kept in the store."""
    s = get_site(site_file)
    with read.reader(s) as r:
        data = baselines.show(r)
    if as_json:
        print_json(data)
        return
    rows = [(p, m, f"{b['median']:.4g}", f"{b['mad']:.3g}", b["nodes"], b["source"])
            for p, metrics in data["baselines"].items() for m, b in metrics.items()]
    if not rows:
        console.print("no baseline kept yet (the first passed sweep with fleet verdicts seeds one)")
        return
    console.print(table("burn-in baselines", ["profile", "metric", "median", "MAD", "nodes", "from"], rows))


@baseline.command("set")
@site_option
@click.option("--from", "from_file", type=click.Path(dir_okay=False), default=None,
              help="A baseline file (the JSON `baseline show --json` prints).")
@click.option("--sweep", "sweep_id", default=None, help="From this passed sweep (default: the newest passed one).")
@dry_run_option
@reason_option("burn-in baseline")
@json_option
def baseline_set(site_file, from_file, sweep_id, dry_run, reason, as_json) -> None:
    """Set the baselines from a passed sweep or from a file."""
    s = get_site(site_file)
    store = Store.for_site(s)
    plan = baselines.plan_set(store, s, from_file=from_file, sweep_id=sweep_id)
    if not dry_run:
        baselines.apply_set(store, plan, reason=reason)
    if as_json:
        print_json({**plan, "dry_run": dry_run})
        return
    console.print(table(f"baselines from {plan['source']}", ["profile", "metric", "median", "was"],
                        [(c["profile"], c["metric"], f"{c['median']:.4g}",
                          f"{c['was']:.4g}" if c["was"] is not None else "") for c in plan["changes"]]))
    console.print("dry run: nothing changed" if dry_run else f"{len(plan['changes'])} baseline(s) set")


@baseline.command("reset")
@site_option
@click.option("--profile", default=None, help="Only this profile's baselines.")
@dry_run_option
@reason_option("burn-in baseline reset")
@json_option
def baseline_reset(site_file, profile, dry_run, reason, as_json) -> None:
    """Forget the baselines (the next passed sweep seeds new ones)."""
    s = get_site(site_file)
    store = Store.for_site(s)
    plan = baselines.plan_reset(store, profile)
    removed = 0 if dry_run else baselines.apply_reset(store, plan, reason=reason)
    if as_json:
        print_json({**plan, "removed": removed, "dry_run": dry_run})
        return
    what = ", ".join(f"{p} ({len(m)} metric(s))" for p, m in plan["removes"].items()) or "nothing"
    console.print(f"{'would remove' if dry_run else 'removed'}: {what}")
