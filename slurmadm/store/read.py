"""Head-side reads: every host's records from the central store when the site has one (each
with the host it came from), else this host's own store. The CLI's `audit log`, `health
status|history|calibrate` and `burnin status` read through here.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import SlurmadmError

_SAFE_HOST = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


@dataclass
class Reader:
    """Anything with `.query(sql, args)`: a central store, or a local `Store`."""
    source: Any
    central: bool
    host: str  # this host (the origin of a local store's rows)

    def query(self, sql: str, args=()) -> list[dict[str, Any]]:
        return self.source.query(sql, args)

    @property
    def origin(self) -> str:
        """SQL for the host a row came from."""
        if self.central:
            return "origin"
        return f"'{self.host}'" if _SAFE_HOST.match(self.host) else "''"

    def trusted(self, node_col: str = "node", origin_col: str = "origin") -> str:
        """SQL: the row came from the node it is about, or from a host that is no node's
        account (the head, for head-side checks): what a node's account ships about another
        node (its origin set by MariaDB, store.node_user) is left out. Always true locally."""
        if not self.central:
            return "1=1"
        return (f"({origin_col} = {node_col} OR {origin_col} NOT IN "
                "(SELECT store_accounts.origin FROM store_accounts))")

    @property
    def newest_first(self) -> str:
        """Arrival order: the central store's `seq`, a local store's row id."""
        return "ts DESC, seq DESC" if self.central else "id DESC"


def _warn(msg: str) -> None:
    print(f"slurmadm: warning: {msg}", file=sys.stderr)


@contextmanager
def reader(site, *, node: str | None = None, warn: Callable[[str], None] = _warn) -> Iterator[Reader]:
    """The site's records. With a central store, this host's own queued records are shipped
    first (best effort: a failure is a warning; the rest of the fleet is still shown)."""
    from .ship import ship

    def ship_first(c, host: str) -> None:
        try:
            out = ship(site.store, host=host, local_path=site.store.local_path(node),
                       audit_log=site.store.audit_log, central=c, deadline=time.monotonic() + 10)
            if out.remaining:
                warn(f"{out.remaining} of this host's records are still to ship")
        except SlurmadmError as exc:
            c.rollback()
            warn(f"this host's records not shipped: {exc}")

    with _open(site, node, ship_first) as r:
        yield r


def trusted_sql(source, node_col: str = "node", origin_col: str = "origin") -> str:
    """Reader.trusted() for anything with `.query` (a local Store is trusted as it is)."""
    return source.trusted(node_col, origin_col) if isinstance(source, Reader) else "1=1"


@contextmanager
def trusted(site, *, node: str | None = None) -> Iterator[Reader]:
    """What a decision reads (the webhook's clean-run count, `bmc recover`'s first health
    run): the central store when the site has one, else this host's own store. Filter rows with
    `Reader.trusted()`. Nothing is shipped first (a decision never waits for that)."""
    with _open(site, node) as r:
        yield r


@contextmanager
def _open(site, node: str | None, before: Callable | None = None) -> Iterator[Reader]:
    """The central store (after `before(connection, host)`) when the site has one, else this
    host's own store."""
    from . import Store, central
    from .ship import host_name

    host = host_name(node)
    if site.store.url is None:
        with Store.for_site(site, node=node) as store:
            yield Reader(store, central=False, host=host)
        return
    with central.connected(site.store) as c:
        if before is not None:
            before(c, host)
        central.require_current(c)
        yield Reader(c, central=True, host=host)


# ------------------------------------------------------------------------------ audit events

def events(r: Reader, *, since: float | None = None, action: str | None = None, target: str | None = None,
           host: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
    sql = f"SELECT {r.origin} AS host, id, ts, actor, action, target, reason, detail FROM events WHERE 1=1"
    args: list[Any] = []
    if since is not None:
        sql += " AND ts >= ?"
        args.append(since)
    if action is not None:
        sql += " AND action LIKE ?"
        args.append(action.replace("*", "%"))
    if target is not None:
        sql += " AND target = ?"
        args.append(target)
    if host is not None:
        sql += f" AND {r.origin} = ?"
        args.append(host)
    sql += f" ORDER BY {r.newest_first} LIMIT ?"
    args.append(limit)
    out = r.query(sql, args)
    for e in out:
        e["detail"] = json.loads(e["detail"])
    return out


# ------------------------------------------------------------------------------ check results

RESULT_COLUMNS = "id, ts, run_id, node, context, check_id, status, severity, detail, value, duration_ms"


def latest_results(r: Reader, nodes: set[str] | None = None) -> list[dict[str, Any]]:
    """The newest result of every check on every node."""
    if not r.central:
        rows = r.query(f"SELECT {r.origin} AS host, r.* FROM check_results r JOIN (SELECT node, check_id, MAX(id) AS id "
                       "FROM check_results GROUP BY node, check_id) last ON r.id = last.id ORDER BY r.node, r.check_id")
    else:
        # newest by time (several hosts may report on one node), ties to the later arrival
        rows = r.query(
            f"SELECT origin AS host, c.seq, {', '.join('c.' + x.strip() for x in RESULT_COLUMNS.split(','))} "
            f"FROM check_results c JOIN (SELECT node, check_id, MAX(ts) AS ts FROM check_results WHERE {r.trusted()} "
            "GROUP BY node, check_id) last ON c.node = last.node AND c.check_id = last.check_id AND c.ts = last.ts "
            f"WHERE {r.trusted('c.node', 'c.origin')} ORDER BY c.node, c.check_id, c.seq")
        newest: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            newest[(row["node"], row["check_id"])] = row
        rows = [{k: v for k, v in row.items() if k != "seq"} for row in newest.values()]
    return [row for row in rows if nodes is None or row["node"] in nodes]


def history(r: Reader, *, node: str | None = None, check_id: str | None = None, status: str | None = None,
            context: str | None = None, since: float | None = None, limit: int = 200) -> list[dict[str, Any]]:
    sql, args = f"SELECT {r.origin} AS host, {RESULT_COLUMNS} FROM check_results WHERE {r.trusted()}", []
    for col, val in (("node", node), ("check_id", check_id), ("status", status), ("context", context)):
        if val:
            sql += f" AND {col} = ?"
            args.append(val)
    if since is not None:
        sql += " AND ts >= ?"
        args.append(since)
    sql += f" ORDER BY {r.newest_first} LIMIT ?"
    args.append(limit)
    return r.query(sql, args)


# ------------------------------------------------------------------------------ hooks that cannot run

# node_state keys health/hookerror.py writes: the last hook error (JSON) and a count per reason
STATE_KEY = "health.hook-error"
COUNT_PREFIX = "health.hook-errors."


def counts(rows: list[dict]) -> dict[tuple[str, str], int]:
    """(node, reason) -> count, from node_state rows (node, key, value)."""
    out: dict[tuple[str, str], int] = {}
    for r in rows:
        if str(r["key"]).startswith(COUNT_PREFIX) and str(r["value"]).isdigit():
            out[(str(r["node"]), str(r["key"])[len(COUNT_PREFIX):])] = int(r["value"])
    return out


def current(last_errors: list[dict], newest_result: dict[str, float]) -> list[dict]:
    """The hook errors still in force: a node's last hook error with no check result recorded
    for it since. `last_errors`: node_state rows (node, value) of STATE_KEY; `newest_result`:
    node -> the newest check_results ts."""
    out = []
    for r in last_errors:
        try:
            e = json.loads(r["value"])
            ts = float(e["ts"])
        except (ValueError, KeyError, TypeError):
            continue
        if ts > newest_result.get(str(r["node"]), 0.0):
            out.append({"node": str(r["node"]), "ts": ts, "context": str(e.get("context", "")),
                        "reason": str(e.get("reason", "")), "error": str(e.get("error", ""))})
    return sorted(out, key=lambda e: e["node"])


def hook_errors(r: Reader, nodes: set[str] | None = None) -> list[dict[str, Any]]:
    """Nodes whose last health hook run could not load the site, with no check result since
    (health enforcement is off there): node, ts, context, reason, error, count (health/hookerror.py)."""
    rows = r.query("SELECT node, `key`, value FROM node_state WHERE `key` LIKE 'health.hook-error%'")
    if not rows:
        return []
    newest = {row["node"]: float(row["ts"] or 0.0)
              for row in r.query("SELECT node, MAX(ts) AS ts FROM check_results GROUP BY node")}
    per_reason = counts(rows)
    out = current([row for row in rows if row["key"] == STATE_KEY], newest)
    for e in out:
        e["count"] = sum(n for (node, _), n in per_reason.items() if node == e["node"])
    return [e for e in out if nodes is None or e["node"] in nodes]


# ------------------------------------------------------------------------------ silent hosts

def silent_nodes(r: Reader, site, now: float | None = None) -> dict[str, float | None]:
    """Site nodes whose records have not arrived for longer than store.stale_after_minutes:
    node -> last arrival (None: never). Empty without a central store."""
    if not r.central:
        return {}
    now = time.time() if now is None else now
    seen = {row["host"]: row["last_arrival"] for row in r.query("SELECT host, last_arrival FROM hosts")}
    limit = site.store.stale_after_minutes * 60
    return {n: seen.get(n) for n in site.node_names if seen.get(n) is None or now - seen[n] > limit}


def hosts(r: Reader) -> list[dict[str, Any]]:
    return r.query("SELECT host, last_arrival, last_record, records, version FROM hosts ORDER BY host") \
        if r.central else []


def silent_lines(silent: dict[str, float | None], stale_after_minutes: int, fmt: Callable[[float], str]) -> list[str]:
    """One line per group of silent nodes (a hostlist each), for people."""
    from ..hostlist import compress

    never = [n for n, last in silent.items() if last is None]
    out = [f"{compress(never)}: no records ever arrived at the central store"] if never else []
    for n, last in sorted(silent.items()):
        if last is not None:
            out.append(f"{n}: no records arrived since {fmt(last)} (store.stale_after_minutes = {stale_after_minutes})")
    return out
