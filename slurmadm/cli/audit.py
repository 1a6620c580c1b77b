"""`slurmadm audit ...`: read the audit trail (who did what, when, why)."""

from __future__ import annotations

import datetime as dt
import time

import click

from ..errors import UsageError
from ..store import Store
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
@click.option("--limit", type=click.IntRange(1, 100000), default=200, show_default=True)
def log(site_file, as_json, since, action, target, limit) -> None:
    """Show audit events, newest first."""
    s = get_site(site_file)
    since_ts = parse_since(since)
    with Store.for_site(s) as store:
        events = store.events(since=since_ts, action=action, target=target, limit=limit)
    if as_json:
        print_json([e.__dict__ for e in events])
        return
    rows = [
        (when(e.ts), e.actor, e.action, e.target, e.reason)
        for e in events
    ]
    console.print(table(None, ["when", "who", "what", "target", "why"], rows, wrap=["target", "why"],
                        optional=["who"]))
