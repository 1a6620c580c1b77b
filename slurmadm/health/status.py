"""`health status` for people: the latest results of 128 nodes folded into the rows that differ.

Each problem (a result that is not pass or skip) is one row per (check, status, detail) with the
nodes that share it, the node's own name in a detail read as `<node>` (slurmadm.hostlist.neutral);
nodes with no problem at all fold by how many of their checks passed and skipped. So 125 healthy
nodes and 3 distinct failures are 4 rows, not 128 x the checks. `--json` stays one row per node
and check (the store's rows as they are).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..hostlist import fold, neutral

QUIET = ("pass", "skip")
ORDER = {"error": 0, "fail": 1, "warn": 2}


def _span(stamps: list[float]) -> tuple[float, float]:
    return min(stamps), max(stamps)


def fold_results(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of `store.read.latest_results` (plus hook-error rows) folded for people: dicts of
    nodes (a hostlist), count, check_id, status, contexts, oldest and newest ts, detail. Problems
    first (error, fail, warn; then by check id and the most nodes), then the quiet nodes."""
    rows = list(rows)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r)
    problems = [r for r in rows if r["status"] not in QUIET]
    lookup = {}
    for r in problems:
        key = (r["check_id"], r["status"], neutral(str(r["detail"] or ""), r["node"]))
        lookup.setdefault(key, []).append(r)
    out = []
    for g in fold((r["node"], (r["check_id"], r["status"], neutral(str(r["detail"] or ""), r["node"])))
                  for r in problems):
        check, status, detail = g.key
        mine = lookup[g.key]
        oldest, newest = _span([r["ts"] for r in mine])
        out.append({"nodes": g.hostlist, "count": g.count, "check_id": check, "status": status,
                    "contexts": sorted({r["context"] for r in mine}), "oldest": oldest, "newest": newest,
                    "detail": g.named(detail)})
    out.sort(key=lambda x: (ORDER.get(x["status"], 9), x["check_id"], -x["count"], x["nodes"]))
    troubled = {r["node"] for r in problems}
    quiet = {n: rs for n, rs in by_node.items() if n not in troubled}

    def tally(rs: list[dict[str, Any]]) -> tuple[int, int]:
        return sum(r["status"] == "pass" for r in rs), sum(r["status"] == "skip" for r in rs)

    for g in fold((n, tally(rs)) for n, rs in quiet.items()):
        passed, skipped = g.key
        mine = [r for n in g.nodes for r in quiet[n]]
        oldest, newest = _span([r["ts"] for r in mine])
        detail = f"all {passed} check(s) pass" + (f", {skipped} skip" if skipped else "")
        out.append({"nodes": g.hostlist, "count": g.count, "check_id": "(all)",
                    "status": "pass" if passed or not skipped else "skip",
                    "contexts": sorted({r["context"] for r in mine}), "oldest": oldest, "newest": newest,
                    "detail": detail})
    return out


def fold_drained(nodes: Iterable[Any]) -> list[dict[str, Any]]:
    """Drained or down nodes (slurm.model.NodeInfo) folded by state, who set the reason and the
    reason (the node's own name in it read as `<node>`): dicts of nodes, count, state, by, reason."""
    nodes = list(nodes)
    return [{"nodes": g.hostlist, "count": g.count, "state": g.key[0], "by": g.key[1], "reason": g.named(g.key[2])}
            for g in fold((n.name, (n.state_text, n.reason_user, neutral(n.reason, n.name))) for n in nodes)]
