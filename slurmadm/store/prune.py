"""`slurmadm store prune`: the head's job that removes central records older than N days (the
only deletion the central store sees: nodes' accounts have no DELETE, and audit events are
otherwise append-only). Before removing a chain's oldest audit events it records where it cut
(event_anchors), so `audit verify` tells this prune from events removed by anyone else.
"""

from __future__ import annotations

import time
from typing import Any

from . import schema


def plan(c, older_than_days: int, now: float | None = None) -> dict[str, Any]:
    cutoff = (time.time() if now is None else now) - older_than_days * 86400
    tables = {}
    for t in schema.shipped_tables():
        if t.retain:
            tables[t.name] = c.query(f"SELECT count(*) AS n FROM {t.name} WHERE {t.retain} < ?", (cutoff,))[0]["n"]
    anchors = c.query("SELECT e.origin, e.store_id, e.id, e.hash FROM events e JOIN (SELECT origin, store_id, "
                      "MAX(id) AS id FROM events WHERE ts < ? GROUP BY origin, store_id) last ON e.origin = "
                      "last.origin AND e.store_id = last.store_id AND e.id = last.id", (cutoff,))
    return {"cutoff": cutoff, "older_than_days": older_than_days, "rows": tables, "anchors": anchors}


def apply(c, p: dict[str, Any]) -> dict[str, Any]:
    """Remove what `plan` counted, in one transaction; chains cut below an anchor keep it."""
    upsert = ("INSERT INTO event_anchors (origin, store_id, id, hash, ts) VALUES (?, ?, ?, ?, ?) "
              + ("ON DUPLICATE KEY UPDATE id = VALUES(id), hash = VALUES(hash), ts = VALUES(ts)"
                 if c.dialect == "mysql" else
                 "ON CONFLICT(origin, store_id) DO UPDATE SET id = excluded.id, hash = excluded.hash, ts = excluded.ts"))
    now = time.time()
    try:
        for a in p["anchors"]:
            # every event up to the anchor goes: those after it (ts not past the cutoff) stay
            c.execute(upsert, (a["origin"], a["store_id"], a["id"], a["hash"], now))
            c.execute("DELETE FROM events WHERE origin = ? AND store_id = ? AND id <= ?",
                      (a["origin"], a["store_id"], a["id"]))
        for t in schema.shipped_tables():
            if t.retain and t.name != "events":
                c.execute(f"DELETE FROM {t.name} WHERE {t.retain} < ?", (p["cutoff"],))
        c.commit()
    except BaseException:
        c.rollback()
        raise
    return {**p, "applied": True}
