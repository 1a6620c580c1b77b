"""Fabric faults named at their source: InfiniBand port errors or link flaps on k or more nodes
under one leaf switch within a window become ONE incident on the leaf (issue 36).

"suspect leaf su3: 6 nodes, link_downed". The leaves are the site's scalable units, as
topology.conf has them (`Site.scalable_units`: one virtual leaf per unit). The incident alerts a
human (an audit event `repair.leaf` and the exporter's `slurmadm_leaf_suspect`); nodes are never
drained for it here: the breaker already stops mass drains, and this names the cause. Databricks
and Meta both report IB links as a top failure source, concentrated on a few switches and cables
(Kokolis et al., HPCA 2025, section V).

Signals: the `infiniband` health check's failed or warned results (per-port counter rises:
link_downed, symbol_error, link_error_recovery, port_rcv_errors; "link flapped N times").
Incidents are rows of the repair store (v5, `incidents`), part_kind "leaf", part_key and node the
leaf's name, class LEAF, the nodes and counters in the evidence; a second scan while the leaf's
incident is open extends it (count, evidence) instead of opening another.

Imports only store-level code (the repair package's floor): no health, bmc, burnin.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import defaultdict
from typing import Any

from ..record import record

K_NODES = 3          # nodes under one leaf with port faults in the window
WINDOW_S = 900.0     # 15 minutes
CLASS = "LEAF"
ACTION = "repair.leaf"
COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors", "flapped")
_COUNTER = re.compile(r"\b(" + "|".join(COUNTERS) + r")\b")


@record
class Suspect:
    leaf: str
    nodes: list[str]
    counters: list[str]   # which counters rose, most common first
    first_ts: float
    last_ts: float
    incident: str = ""
    action: str = ""      # opened | extended | '' (dry run)

    @property
    def line(self) -> str:
        return f"suspect leaf {self.leaf}: {len(self.nodes)} nodes, {', '.join(self.counters)}"

    def to_json(self) -> dict[str, Any]:
        return {"leaf": self.leaf, "nodes": self.nodes, "counters": self.counters, "first_ts": self.first_ts,
                "last_ts": self.last_ts, "incident": self.incident, "action": self.action, "line": self.line}


def port_faults(store, since: float, until: float) -> dict[str, tuple[float, float, list[str]]]:
    """node -> (first, last, counters) of its InfiniBand port faults in [since, until]."""
    out: dict[str, tuple[float, float, list[str]]] = {}
    for r in store.query("SELECT ts, node, detail FROM check_results WHERE check_id='infiniband' "
                         "AND status IN ('fail', 'warn') AND ts BETWEEN ? AND ? ORDER BY ts", (since, until)):
        names = _COUNTER.findall(r["detail"] or "")
        if not names:
            continue
        first, _last, seen = out.get(r["node"], (float(r["ts"]), 0.0, []))
        out[r["node"]] = (first, float(r["ts"]), seen + names)
    return out


def find(store, leaves: list[tuple[str, list[str]]], *, now: float | None = None, k: int = K_NODES,
         window_s: float = WINDOW_S) -> list[Suspect]:
    """Leaves with port faults on k or more of their nodes in the window ending now."""
    now = time.time() if now is None else now
    faults = port_faults(store, now - window_s, now)
    out: list[Suspect] = []
    for leaf, nodes in leaves:
        hit = [n for n in nodes if n in faults]
        if len(hit) < k:
            continue
        counts: dict[str, int] = defaultdict(int)
        for n in hit:
            for c in set(faults[n][2]):
                counts[c] += 1
        counters = sorted(counts, key=lambda c: (-counts[c], c))
        out.append(Suspect(leaf, hit, counters, min(faults[n][0] for n in hit), max(faults[n][1] for n in hit)))
    return out


def record_suspects(store, suspects: list[Suspect], *, now: float | None = None) -> list[Suspect]:
    """One incident per suspect leaf (opened, or the open one extended) and one audit event that
    alerts a human. Never drains a node. Idempotent within a window: the same leaf and node set
    extends the open incident."""
    now = time.time() if now is None else now
    for s in suspects:
        evidence = {"ts": now, "kind": "signal", "source": "leaf", "nodes": s.nodes, "counters": s.counters,
                    "line": s.line}
        s.incident, s.action = _open_or_extend(store, s, evidence, now)
        store.audit(ACTION, s.leaf, s.line, nodes=s.nodes, counters=s.counters, incident=s.incident,
                    incident_action=s.action, alert=True)
    return suspects


def _has_incidents(store) -> bool:
    return store.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='incidents'").fetchone() is not None


def _open_or_extend(store, s: Suspect, evidence: dict[str, Any], now: float) -> tuple[str, str]:
    if not _has_incidents(store):  # a store before v5: the audit event alone names the leaf
        return "", "alerted"
    with store.transaction() as db:
        row = db.execute("SELECT id, count, evidence FROM incidents WHERE part_kind='leaf' AND part_key=? "
                         "AND state != 'closed' ORDER BY opened_ts DESC LIMIT 1", (s.leaf,)).fetchone()
        if row is not None:
            try:
                ev = json.loads(row["evidence"] or "[]")
            except ValueError:
                ev = []
            ev = (ev + [evidence])[-20:]
            db.execute("UPDATE incidents SET count=?, evidence=?, updated_ts=?, why=? WHERE id=?",
                       (int(row["count"] or 1) + 1, json.dumps(ev), now, s.line, row["id"]))
            _event(db, row["id"], "extended", now, s.line)
            return str(row["id"]), "extended"
        iid = "r" + hashlib.sha1(f"{s.leaf}|leaf|{CLASS}|{now:.3f}|".encode()).hexdigest()[:10]
        db.execute("INSERT INTO incidents (id, node, part_kind, part_key, slot, class, state, step, opened_ts, "
                   "updated_ts, closed_ts, count, evidence, source, why) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (iid, s.leaf, "leaf", s.leaf, "", CLASS, "open", "", now, now, None, 1,
                    json.dumps([evidence]), "leaf", s.line))
        _event(db, iid, "opened", now, s.line)
        return iid, "opened"


def _event(db, iid: str, kind: str, ts: float, why: str) -> None:
    try:
        db.execute("INSERT INTO incident_events (incident_id, ts, kind, state, step, why, detail, ref) "
                   "VALUES (?,?,?,?,?,?,?,?)", (iid, ts, kind, "open", "", why, "{}", ""))
    except Exception:  # noqa: BLE001, S110 - a store without incident_events: the incident row alone
        pass


def scan(store, site, *, now: float | None = None, dry_run: bool = False, k: int = K_NODES,
         window_s: float = WINDOW_S) -> list[Suspect]:
    """Find suspect leaves of the site and (unless dry_run) record them."""
    suspects = find(store, list(site.scalable_units), now=now, k=k, window_s=window_s)
    return suspects if dry_run else record_suspects(store, suspects, now=now)
