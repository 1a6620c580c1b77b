"""Tamper-evident audit: every audit event carries a hash chained to the previous event of the
same store (one chain per host's store file, shipped as they are to the central store).

    hash = sha256(json [prev_hash, id, ts (6 decimals), actor, action, target, reason, detail])

An edited event no longer matches its hash; a removed one leaves its successor's prev_hash
pointing at nothing. `verify` walks each chain (central: per origin and store id, in local id
order) and reports both, which a syslog copy of the events cannot show. A chain whose first
event's prev_hash is not empty begins where the store was pruned (reported, not an error);
events written before version 4 carry no hash and are counted as unchained.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


def event_hash(prev: str, event_id: int, ts: float, actor: str, action: str, target: str, reason: str,
               detail: str) -> str:
    text = json.dumps([prev, int(event_id), f"{float(ts):.6f}", actor, action, target, reason, detail],
                      ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def row_hash(row: dict[str, Any]) -> str:
    return event_hash(row["prev_hash"], row["id"], row["ts"], row["actor"], row["action"], row["target"],
                      row["reason"], row["detail"])


def verify_chain(rows: Iterable[dict[str, Any]], *, anchor: dict[str, Any] | None = None,
                 strict_start: bool = False) -> dict[str, Any]:
    """One chain's events, in id order -> {events, unchained, first_id, last_id, pruned_before,
    problems: [{id, kind: edited | gap, detail}]}. `anchor`: where `store prune` cut the chain;
    `strict_start` (the central store): a chain that starts after removed events without such
    an anchor is a gap (a local store prunes what it shipped: not there)."""
    out: dict[str, Any] = {"events": 0, "unchained": 0, "first_id": None, "last_id": None,
                           "pruned_before": False, "problems": []}
    prev: dict[str, Any] | None = None
    for row in rows:
        out["events"] += 1
        if not row["hash"]:
            if prev is not None and prev["hash"]:  # an unchained event after chained ones: not written by slurmadm
                out["problems"].append({"id": row["id"], "kind": "edited",
                                        "detail": "event without a hash after chained events"})
            out["unchained"] += 1
            prev = row
            continue
        if out["first_id"] is None:
            out["first_id"] = row["id"]
            if row["prev_hash"] and prev is None:
                if anchor is not None and anchor["hash"] == row["prev_hash"]:
                    out["pruned_before"] = True
                elif strict_start:
                    out["problems"].append({"id": row["id"], "kind": "gap",
                                            "detail": "the events before it were removed, and not by `store prune`"})
                else:
                    out["pruned_before"] = True
        if row_hash(row) != row["hash"]:
            out["problems"].append({"id": row["id"], "kind": "edited",
                                    "detail": "its content does not match its hash"})
        if prev is not None and prev["hash"] and row["prev_hash"] != prev["hash"]:
            out["problems"].append({"id": row["id"], "kind": "gap",
                                    "detail": f"its previous event is not event {prev['id']} as stored "
                                              f"(removed or edited events between {prev['id']} and {row['id']})"})
        out["last_id"] = row["id"]
        prev = row
    return out


def verify(reader) -> dict[str, Any]:
    """Every chain the reader sees (a store/read.Reader): {ok, chains: [{origin, store_id, ...}]}."""
    if reader.central:
        rows = reader.query("SELECT origin, store_id, id, ts, actor, action, target, reason, detail, prev_hash, "
                            "hash FROM events ORDER BY origin, store_id, id")
    else:
        rows = reader.query(f"SELECT {reader.origin} AS origin, '' AS store_id, id, ts, actor, action, target, "
                            "reason, detail, prev_hash, hash FROM events ORDER BY id")
    chains: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        chains.setdefault((r["origin"], r["store_id"]), []).append(r)
    anchors = {(a["origin"], a["store_id"]): a for a in reader.query(
        "SELECT origin, store_id, id, hash FROM event_anchors")} if reader.central else {}
    out = [{"origin": o, "store_id": s, **verify_chain(rs, anchor=anchors.get((o, s)), strict_start=reader.central)}
           for (o, s), rs in sorted(chains.items())]
    return {"ok": not any(c["problems"] for c in out), "chains": out}
