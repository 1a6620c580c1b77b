"""Burn-in history in slurmadm's store: one row per sweep, per node tested, per pair run (the
tables burnin_sweeps, burnin_nodes and burnin_pairs are declared in slurmadm/store/schema.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from ..store import Store
from . import fleet
from .report import warnings

# node_state keys
REQUALIFY_KEY = "burnin.requalify"  # the slurmadm drain reason a node had before a sweep resumed it


def unique_sweep_id(store: Store, base: str) -> str:
    """`base`, or `base-2`, `base-3`... when sweeps started within the same second."""
    taken = {r["id"] for r in store.db.execute("SELECT id FROM burnin_sweeps WHERE id = ? OR id LIKE ?",
                                                 (base, f"{base}-%"))}
    n, candidate = 1, base
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def start_sweep(store: Store, sweep_id: str, *, pid: int, host: str, actor: str, nodes: str) -> None:
    with store.transaction() as db:
        db.execute("INSERT INTO burnin_sweeps (id, started, status, pid, host, actor, nodes) VALUES (?,?,?,?,?,?,?)",
                   (sweep_id, time.time(), "running", pid, host, actor, nodes))


def finish_sweep(store: Store, sweep_id: str, *, status: str, summary: dict[str, Any], report: str) -> None:
    nodes = summary["nodes"]
    counts = {v: sum(1 for n in nodes if n["verdict"] == v) for v in ("pass", "fail", "skipped")}
    with store.transaction() as db:
        db.execute(
            "UPDATE burnin_sweeps SET finished=?, status=?, passed=?, failed=?, skipped=?, report=?, summary=? "
            "WHERE id=?",
            (time.time(), status, counts["pass"], counts["fail"], counts["skipped"], report,
             json.dumps(summary, sort_keys=True, default=str), sweep_id),
        )
        for n in nodes:
            db.execute(
                "INSERT OR REPLACE INTO burnin_nodes (sweep_id, node, why, verdict, job_id, busbw, action, reason, "
                "tests, ts) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (sweep_id, n["node"], n["why"], n["verdict"], n["job_id"], n["busbw_gbps"], n["action"],
                 n["reason"], json.dumps(n["tests"], default=str), time.time()),
            )
        for p in summary["pairs"]:
            db.execute(
                "INSERT INTO burnin_pairs (sweep_id, round, kind, node_a, node_b, status, busbw, detail, job_id) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (sweep_id, p["round"], p["kind"], p["a"], p["b"], p["status"], p["busbw_gbps"], p["detail"],
                 p["job_id"]),
            )


def sweeps(store, *, limit: int = 20) -> list[dict[str, Any]]:
    """The newest sweeps. `store`: a local Store or a central store's reader (its rows carry
    `origin`, the host that ran the sweep and shipped it). `warnings`: the slowdowns past
    burnin.slowdown_warn_percent since the sweep before each (report.warnings)."""
    from ..store.read import trusted_sql

    # a sweep is the head's record: one a node's account shipped does not count (issue 24)
    out = store.query(f"SELECT * FROM burnin_sweeps WHERE {trusted_sql(store, 'host')} ORDER BY started DESC "
                      "LIMIT ?", (limit,))
    for d in out:
        d.pop("seq", None)
        try:
            summary = json.loads(d.pop("summary") or "{}")
            d["warnings"] = warnings(summary) if summary.get("nodes") is not None else []
        except (ValueError, KeyError, TypeError):
            summary, d["warnings"] = {}, []
        d["fleet"] = fleet_view(summary)
        d["stragglers"] = sorted(n for n, f in d["fleet"].items() if f["level"] == "slow")
    return out


def fleet_view(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """node -> its fleet-relative verdict in the sweep: level, sweeps in a row slow, each
    metric's share of the fleet median, and the worst finding as text."""
    out = {}
    for n in summary.get("nodes") or []:
        f = n.get("fleet") if isinstance(n, dict) else None
        if not f:
            continue
        out[n["node"]] = {"level": f.get("level"), "slow_streak": n.get("slow_streak") or 0,
                          "shares": fleet.shares(f), "worst": fleet.describe(f["worst"]) if f.get("worst") else None}
    return out


def previous_summary(store: Store, before: str) -> dict[str, Any] | None:
    """The JSON summary of the last finished sweep before sweep `before` (for the comparison)."""
    row = store.db.execute(
        "SELECT summary FROM burnin_sweeps WHERE id < ? AND status != 'running' AND finished IS NOT NULL "
        "ORDER BY id DESC LIMIT 1", (before,)).fetchone()
    return json.loads(row["summary"]) if row else None


def running_sweeps(store: Store) -> list[dict[str, Any]]:
    rows = store.db.execute("SELECT id, pid, host, started FROM burnin_sweeps WHERE status='running'")
    return [dict(r) for r in rows]


def mark_abandoned(store: Store, sweep_id: str) -> None:
    with store.transaction() as db:
        db.execute("UPDATE burnin_sweeps SET status='interrupted', finished=? WHERE id=? AND status='running'",
                   (time.time(), sweep_id))


def first_sweep(store: Store) -> float | None:
    """When the store's first sweep began (None: none yet): the start of the burn-in history a
    node never tested is counted from (burnin.due_days)."""
    row = store.db.execute("SELECT MIN(started) AS t FROM burnin_sweeps").fetchone()
    return None if row is None or row["t"] is None else float(row["t"])


def last_tested(store: Store) -> dict[str, float]:
    rows = store.db.execute("SELECT node, MAX(ts) AS ts FROM burnin_nodes WHERE verdict != 'skipped' GROUP BY node")
    return {r["node"]: r["ts"] for r in rows}


# ------------------------------------------------------------------------------ fleet-relative


def suspects(store: Store) -> dict[str, str]:
    """node -> why it is suspected (`slow in sweep S: stress-tflops 700 = 70% of baseline median
    1002`): the newest sweep that tested the node passed it and found it slow against its fleet
    or baseline. The next sweep takes such a node first (select.py), so that a straggler is
    confirmed (drained after burnin.straggler.drain_after sweeps in a row) or cleared the next
    night instead of at its turn."""
    rows = store.db.execute(
        "SELECT n.node, n.sweep_id FROM burnin_nodes n JOIN (SELECT node, MAX(ts) AS ts FROM burnin_nodes "
        "WHERE verdict != 'skipped' GROUP BY node) m ON m.node = n.node AND m.ts = n.ts WHERE n.verdict = 'pass'")
    newest: dict[str, set[str]] = {}
    for r in rows:
        newest.setdefault(r["sweep_id"], set()).add(r["node"])
    out: dict[str, str] = {}
    for sweep_id, nodes in sorted(newest.items()):
        row = store.db.execute("SELECT summary FROM burnin_sweeps WHERE id = ?", (sweep_id,)).fetchone()
        try:
            summary = json.loads(row["summary"] or "{}") if row else {}
        except ValueError:
            continue
        for node, f in fleet_view(summary if isinstance(summary, dict) else {}).items():
            if node in nodes and f["level"] == "slow":
                out[node] = f"slow in sweep {sweep_id}" + (f": {f['worst']}" if f["worst"] else "")
    return out


def node_history(store, node: str, *, limit: int = 10) -> list[dict[str, Any]]:
    """The node's last `limit` sweeps that tested it, newest first: sweep id, started, verdict,
    action, and its fleet-relative entry (burnin/fleet.py; None in sweeps before fleet verdicts
    or when it did not pass). `store`: a local Store or a central reader."""
    rows = store.query("SELECT n.sweep_id, n.verdict, n.action, n.reason, s.started, s.summary "
                       "FROM burnin_nodes n JOIN burnin_sweeps s ON s.id = n.sweep_id "
                       "WHERE n.node = ? AND n.verdict != 'skipped' ORDER BY s.started DESC LIMIT ?", (node, limit))
    out = []
    for r in rows:
        try:
            summary = json.loads(r.get("summary") or "{}")
        except ValueError:
            summary = {}
        entry = next((n for n in summary.get("nodes") or [] if n.get("node") == node), {})
        out.append({"sweep_id": r["sweep_id"], "started": r["started"], "verdict": r["verdict"],
                    "action": r["action"], "reason": r["reason"], "fleet": entry.get("fleet")})
    return out


def slow_streak(store, node: str, *, before: str, limit: int = 10) -> int:
    """How many of the node's sweeps before sweep `before`, newest first and in a row, found it
    slow (fleet level `slow`)."""
    n = 0
    for h in node_history(store, node, limit=limit + 1):
        if h["sweep_id"] >= before:
            continue
        if (h["fleet"] or {}).get("level") != "slow":
            break
        n += 1
        if n >= limit:
            break
    return n


def baselines(store) -> dict[str, dict[str, dict[str, Any]]]:
    """profile -> metric -> {median, mad, nodes, source, ts}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in store.query("SELECT profile, metric, median, mad, nodes, source, ts FROM burnin_baselines "
                         "ORDER BY profile, metric"):
        out.setdefault(r["profile"], {})[r["metric"]] = {k: r[k] for k in ("median", "mad", "nodes", "source", "ts")}
    return out


def set_baselines(store: Store, rows: dict[str, dict[str, dict[str, Any]]], *, source: str) -> None:
    with store.transaction() as db:
        for profile, metrics in rows.items():
            for metric, b in metrics.items():
                db.execute("INSERT OR REPLACE INTO burnin_baselines (profile, metric, median, mad, nodes, source, ts) "
                           "VALUES (?,?,?,?,?,?,?)", (profile, metric, float(b["median"]), float(b.get("mad") or 0),
                                                      int(b.get("nodes") or 0), source, time.time()))


def reset_baselines(store: Store, profile: str | None = None) -> int:
    with store.transaction() as db:
        if profile:
            cur = db.execute("DELETE FROM burnin_baselines WHERE profile = ?", (profile,))
        else:
            cur = db.execute("DELETE FROM burnin_baselines")
        return cur.rowcount
