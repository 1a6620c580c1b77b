"""What the head exporter reads from slurmadm's records: each node's latest health verdicts, its
last burn-in, fleet drift and, with a central store, when each host's records last arrived.

With `store.url` set (issue 14) the records are every node's, read from the central store (the
head never ships or writes during a scrape); without it, this host's own SQLite file, opened
read-only (nothing is created or migrated by a scrape). Both answer the same queries
(slurmadm.store.read), so the metrics are the same either way.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any, Protocol

from ..store import read

DRIFT_CHECK = "software-drift"  # the fleet's health check id
FAILING = ("fail", "error")


class StoreFacts(Protocol):
    def read(self) -> dict[str, Any]: ...


def empty() -> dict[str, Any]:
    return {"burnin": {}, "burnin_fleet": {}, "drift": None, "failing": {}, "last": {}, "checks": {}, "arrivals": None, "silent": None,
            "repair": None, "rma": None}


def _lemon_settings(site):
    from ..repair import ladder  # the lemon thresholds: [repair] of the site, else the defaults

    return ladder.settings(getattr(site, "repair", None))


def facts(r: read.Reader, site=None, now: float | None = None, *, repair: bool = True,
          rma: bool = True, lemon_settings=None) -> dict[str, Any]:
    """burnin: node -> (ts, verdict) of its newest burn-in row; drift: nodes whose latest
    software-drift verdict is not a pass (None: no such check recorded); failing: node -> checks
    whose latest verdict is fail/error; last: node -> newest result time; checks: (check, status)
    -> nodes; arrivals (central only): host -> last arrival; silent (central, with a site): site
    nodes whose records stopped arriving (store.stale_after_minutes)."""
    out = empty()
    ok = read.trusted_sql(r)  # a node's account's rows about another node do not count (issue 24)
    newest: dict[str, str] = {}
    for row in r.query("SELECT b.node AS node, b.ts AS ts, b.verdict AS verdict, b.sweep_id AS sweep_id "
                       "FROM burnin_nodes b JOIN "
                       f"(SELECT node, MAX(ts) AS ts FROM burnin_nodes WHERE {ok} GROUP BY node) newest "
                       f"ON b.node = newest.node AND b.ts = newest.ts WHERE {read.trusted_sql(r, 'b.node', 'b.origin')}"):
        out["burnin"][str(row["node"])] = (float(row["ts"]), str(row["verdict"]))
        newest[str(row["node"])] = str(row["sweep_id"])
    out["burnin_fleet"] = burnin_fleet(r, newest)
    drift = None
    for row in read.latest_results(r):
        node, check, status = str(row["node"]), str(row["check_id"]), str(row["status"])
        out["last"][node] = max(out["last"].get(node, 0.0), float(row["ts"]))
        failing = out["failing"].setdefault(node, [])
        if status in FAILING:
            failing.append(check)
        out["checks"][(check, status)] = out["checks"].get((check, status), 0) + 1
        if check == DRIFT_CHECK:
            drift = (drift or 0) + (1 if status in ("fail", "warn") else 0)
    out["drift"] = drift
    if repair:
        out["repair"] = repair_facts(r, lemon_settings if lemon_settings is not None else _lemon_settings(site), now)
    if rma:
        from ..repair.rma import figures  # RMA cases (slurmadm/repair/rma.py): states, turnaround, per model/class

        out["rma"] = figures(r)
    if r.central:
        out["arrivals"] = {str(h["host"]): float(h["last_arrival"]) for h in read.hosts(r)
                           if h["last_arrival"] is not None}
        if site is not None:
            out["silent"] = len(read.silent_nodes(r, site, now))
    return out


def repair_facts(r: read.Reader, lemon_settings=None, now: float | None = None) -> dict[str, Any]:
    """Incidents not closed (slurmadm/repair/): counts by (class, state), and each node's oldest
    one's open time (how long it has been in repair); the steps taken; the lemons (`repair
    lemons`: held as one, or past the site's thresholds, by count or failed qualifications)."""
    from ..repair import views
    by: dict[tuple[str, str], int] = {}
    since: dict[str, float] = {}
    for row in r.query("SELECT node, class, state, opened_ts FROM incidents WHERE state != 'closed'"):
        key = (str(row["class"]), str(row["state"]))
        by[key] = by.get(key, 0) + 1
        node = str(row["node"])
        since[node] = min(since.get(node, float(row["opened_ts"])), float(row["opened_ts"]))
    settings = lemon_settings if lemon_settings is not None else _lemon_settings(None)
    lemons = [{"kind": d["kind"], "name": d["name"], "held": bool(d["held"])}
              for d in views.lemons(r, settings, time.time() if now is None else now)]
    return {"open": by, "since": since, "steps": repair_steps(r), "lemons": lemons}


def repair_steps(r: read.Reader) -> dict[tuple[str, str], int]:
    """(step, outcome) -> how many repair steps ended so (incident_events of kind `step`, the
    ones that only mark a step started left out); the rows are never pruned, so a count only grows."""
    out: dict[tuple[str, str], int] = {}
    rows = r.query("SELECT step, detail, COUNT(*) AS n FROM incident_events WHERE kind = 'step' GROUP BY step, detail")
    for row in rows:
        try:
            outcome = str(json.loads(row["detail"] or "{}").get("outcome") or "done")
        except (ValueError, AttributeError):
            outcome = "done"
        if outcome == "running":
            continue
        key = (str(row["step"]) or "none", outcome)
        out[key] = out.get(key, 0) + int(row["n"])
    return out


def burnin_fleet(r: read.Reader, newest: dict[str, str]) -> dict[str, dict[str, Any]]:
    """node -> {"shares": {metric: share of the fleet median}, "streak": sweeps in a row slow}
    from the node's newest burn-in sweep (burnin/fleet.py); nodes without fleet verdicts there
    are left out."""
    ids = sorted(set(newest.values()))
    out: dict[str, dict[str, Any]] = {}
    for k in range(0, len(ids), 200):
        chunk = ids[k:k + 200]
        rows = r.query(f"SELECT id, summary FROM burnin_sweeps WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        for row in rows:
            try:
                nodes = json.loads(row["summary"] or "{}").get("nodes") or []
            except (ValueError, AttributeError):
                continue
            for n in nodes:
                fl = n.get("fleet") if isinstance(n, dict) else None
                if not fl or newest.get(n.get("node")) != row["id"]:
                    continue
                shares = {m: e["share"] for m, e in (fl.get("metrics") or {}).items()
                          if isinstance(e, dict) and isinstance(e.get("share"), (int, float))}
                out[n["node"]] = {"shares": shares, "level": fl.get("level"),
                                  "streak": int(n.get("slow_streak") or 0) if fl.get("level") == "slow" else 0}
    return out


class _ReadOnlySqlite:
    def __init__(self, path: str):
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
        self.db.row_factory = sqlite3.Row

    def query(self, sql: str, args=()) -> list[dict[str, Any]]:
        return [dict(row) for row in self.db.execute(sql, tuple(args))]


class LocalStoreFacts:
    """This host's store file, read-only; a missing file or table means no records yet."""

    def __init__(self, path: str, lemon_settings=None):
        self.path = path
        self.lemon_settings = lemon_settings  # repair/ladder.Settings: the site's lemon thresholds

    def read(self) -> dict[str, Any]:
        if not self.path or not os.path.exists(self.path):
            return empty()
        src = _ReadOnlySqlite(self.path)
        try:
            tables = {row["name"] for row in src.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"burnin_nodes", "check_results"} <= tables:
                return empty()
            from ..store.ship import host_name

            return facts(read.Reader(src, central=False, host=host_name(None)), repair="incidents" in tables,
                         rma="rma_cases" in tables, lemon_settings=self.lemon_settings)
        finally:
            src.db.close()


class CentralStoreFacts:
    """Every node's records in the central store (store.url); a store this slurmadm cannot read
    (an older or newer schema) is an error of the read, shown as the source's staleness."""

    def __init__(self, site):
        self.site = site

    def read(self) -> dict[str, Any]:
        from ..store import central

        with central.connected(self.site.store) as c:
            central.require_current(c)
            return facts(read.Reader(c, central=True, host=""), self.site, time.time())


def for_site(site) -> StoreFacts:
    if site.store.url is not None:
        return CentralStoreFacts(site)
    return LocalStoreFacts(site.store.local_path(None), _lemon_settings(site))
