"""`slurmadm report`: what faults cost over time (see slurmadm/report/)."""

from __future__ import annotations

import click

from .common import Group, console, get_site, json_option, print_json, site_option, table


@click.group(cls=Group)
def report() -> None:
    """Reports over time: reliability, suspect leaf switches."""


@report.command("reliability")
@site_option
@json_option
@click.option("--since", default="30d", show_default=True, help="From a date (2026-11-01) or an age (30d).")
@click.option("--html", "html_file", metavar="FILE", help="Also write the report as a page (no scripts, no network).")
@click.option("--top", default=10, show_default=True, help="How many of the costliest nodes to show.")
def reliability(site_file: str | None, as_json: bool, since: str, html_file: str | None, top: int) -> None:
    """Per day and week: GPU-hours of completed runs, lost in failed runs by verdict, out of
    service by cause, idle; MTBF per node, GPU model and class; MTTR per class; ETTR (Meta's
    definition, its assumptions stated); the nodes that cost most."""
    from pathlib import Path

    from ..files import write_atomic
    from ..jobs import failures
    from ..report import html
    from ..report import reliability as capability
    from ..store import read
    from .audit import parse_since

    site = get_site(site_file)
    since_ts = parse_since(since)
    runs, attributed = failures.collect(site, since_ts)
    with read.trusted(site) as r:
        rep = capability.build(site, runs, attributed, r, since_ts, top=top)
    if html_file:
        write_atomic(Path(html_file), html.render_html(rep))
    if as_json:
        print_json(rep)
        return
    console.print(html.headline(rep), highlight=False)
    cols = ["week", "total", "completed", "lost: infra", "lost: user", "lost: unknown", "other", "out of service",
            "idle"]
    rows = [(w["week"], *(f"{w.get(k, 0.0):,.1f}" for k in ("total", "completed", "lost_infrastructure", "lost_user",
                                                            "lost_unknown", "other", "out_of_service", "idle")))
            for w in rep["weeks"]]
    console.print(table("GPU-hours per week", cols, rows))
    if rep["costliest_nodes"]:
        console.print(table("the nodes that cost most (GPU-h)", ["node", "lost in runs", "out of service",
                                                                  "incidents", "cost"],
                            [(n["node"], f"{n['lost_gpu_hours']:,.2f}", f"{n['out_of_service_gpu_hours']:,.2f}",
                              n["incidents"], f"{n['cost_gpu_hours']:,.2f}") for n in rep["costliest_nodes"]]))
    mt = rep["mtbf_hours"]
    mrows = [("fleet", "-" if mt["fleet"] is None else f"{mt['fleet']:,.1f}", "")]
    mrows += [(f"class {c}", f"{v:,.1f}", f"{rep['mttr_hours'][c]:,.2f}" if c in rep["mttr_hours"] else "-")
              for c, v in mt["class"].items()]
    console.print(table("MTBF / MTTR, hours", ["what", "MTBF", "MTTR"], mrows))
    rma = html.rma_line(rep)
    if rma:
        console.print(rma, highlight=False)
    e = rep["ettr"]
    console.print(f"ETTR {'-' if e['value'] is None else format(e['value'], '.3f')} over {e['jobs']} jobs; "
                  f"assumptions: {'; '.join(e['assumptions'])}", highlight=False)
    if html_file:
        console.print(f"page: {html_file}", highlight=False)


@report.command("leaves")
@site_option
@json_option
@click.option("--record/--dry-run", "record", default=False,
              help="--record opens (or extends) one incident per suspect leaf and alerts; default: only show.")
@click.option("--nodes", "k", default=3, show_default=True, help="Nodes with port faults under one leaf.")
@click.option("--window", "window_min", default=15, show_default=True, help="Minutes.")
def leaves(site_file: str | None, as_json: bool, record: bool, k: int, window_min: int) -> None:
    """Leaf switches (the site's scalable units) with InfiniBand port errors or flaps on K or
    more of their nodes within the window. Never drains a node. Exit 1 when any is suspect."""
    from ..repair import leaf
    from ..store import Store

    site = get_site(site_file)
    with Store.for_site(site) as store:
        found = leaf.scan(store, site, dry_run=not record, k=k, window_s=window_min * 60)
    if as_json:
        print_json({"suspects": [s.to_json() for s in found], "recorded": record})
    else:
        for s in found:
            console.print(s.line + (f" (incident {s.incident}, {s.action})" if s.incident else ""), highlight=False)
        if not found:
            console.print(f"no leaf with port faults on {k}+ nodes in the last {window_min} min", highlight=False)
    raise SystemExit(1 if found else 0)
