"""`slurmadm audit ...`: read the audit trail (who did what, when, why)."""

from __future__ import annotations

import datetime as dt
import time

import click

from ..errors import UsageError
from ..store import read
from .common import Group, console, get_site, json_option, print_json, site_option, table, when


def parse_since(text: str | None) -> float | None:
    """`2026-11-01`, `2026-11-01T12:00`, or a relative `90m`, `24h`, `7d`."""
    if not text:
        return None
    units = {"m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return time.time() - int(text[:-1]) * units[text[-1]]
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError(f"--since: {text!r} is not a date (2026-11-01[T12:00]) or an age (90m, 24h, 7d)") from None


@click.group(cls=Group)
def audit() -> None:
    """The audit trail of every change slurmadm made."""


@audit.command("log")
@site_option
@json_option
@click.option("--since", help="Only events since a date (2026-11-01) or an age (24h, 7d).")
@click.option("--action", help="Only this action (glob with *, e.g. 'node.*').")
@click.option("--target", help="Only events on this target (a node, an account, a file).")
@click.option("--host", help="Only events recorded on this host (with a central store: any node).")
@click.option("--limit", type=click.IntRange(1, 100000), default=200, show_default=True)
def log(site_file, as_json, since, action, target, host, limit) -> None:
    """Show audit events, newest first (every host's, from the central store when the site has one)."""
    s = get_site(site_file)
    since_ts = parse_since(since)
    with read.reader(s) as r:
        events = read.events(r, since=since_ts, action=action, target=target, host=host, limit=limit)
        central = r.central
    if as_json:
        print_json(events)
        return
    head = ["when", "who", "what", "target", "why"]
    rows = [(when(e["ts"]), e["actor"], e["action"], e["target"], e["reason"]) for e in events]
    if central:
        head.insert(1, "host")
        rows = [(row[0], e["host"], *row[1:]) for row, e in zip(rows, events)]
    console.print(table(None, head, rows, wrap=["target", "why"], optional=["who"]))


@audit.command("verify")
@site_option
@json_option
def verify(site_file, as_json) -> None:
    """Check the audit trail's hash chains (one per host's store; every host's from the central
    store when the site has one): report an edited event or a gap where events were removed.
    Exit 1 when one is found."""
    from ..store import chain

    s = get_site(site_file)
    with read.reader(s) as r:
        out = chain.verify(r)
        out["central"] = r.central
    if as_json:
        print_json(out)
    else:
        for c in out["chains"]:
            name = c["origin"] + (f" (store {c['store_id']})" if c["store_id"] else "")
            span = f"events {c['first_id']}..{c['last_id']}" if c["first_id"] is not None else "no chained events"
            extra = [f"{c['unchained']} from before chaining"] if c["unchained"] else []
            if c["pruned_before"]:
                extra.append("earlier events pruned")
            status = "ok" if not c["problems"] else f"{len(c['problems'])} problem(s)"
            console.print(f"{name}: {c['events']} event(s), {span}" + (f" ({', '.join(extra)})" if extra else "")
                          + f": {status}", markup=False, highlight=False)
            for p in c["problems"]:
                console.print(f"  event {p['id']}: {p['kind']}: {p['detail']}", markup=False, highlight=False)
        if not out["chains"]:
            console.print("no audit events")
    if not out["ok"]:
        raise SystemExit(1)
