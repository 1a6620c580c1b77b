"""Shared by the repair unit tests: a store with drain events as the verdict sources record them."""

from __future__ import annotations

import json

from slurmadm.store import Store


def inventory(store: Store, node: str, serials: list[str]) -> None:
    """The node's GPU inventory as health's gpu-count check keeps it (node_state health.gpus)."""
    inv = [{"index": i, "bus_id": f"00000000:{0x18 + i:02X}:00.0", "serial": s, "uuid": f"GPU-{s}"}
           for i, s in enumerate(serials)]
    store.set_node_state(node, "health.gpus", json.dumps(inv))


def health_drain(store: Store, node: str, results: list[tuple[str, str]], *, ts: float, run_id: str,
                 context: str = "prolog") -> None:
    """One health run that drained `node`: its failing check results and the drain event."""
    with store.transaction() as db:
        db.executemany(
            "INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value, "
            "duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
            [(ts, run_id, node, context, c, "fail", "critical", d, None, 1.0) for c, d in results])
    check_id, detail = results[0]
    reason = f"slurmadm: {check_id}: {detail} [{context}]"
    eid = store.audit("node.drain", node, reason, context=context, run_id=run_id)
    store.db.execute("UPDATE events SET ts=? WHERE id=?", (ts, eid))


def xid_line(gpu: int, xid: int, name: str, action: str) -> str:
    return f"GPU{gpu} XID {xid} {name} ({action})"
