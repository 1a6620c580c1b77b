"""Checks in observe mode: a new check, or a stricter threshold, tried on the whole fleet before it
may drain anything.

A site puts a check in observe mode with `[health.checks.<id>] on_fail = "observe"`: the hooks run
it in every context it has, record its results as usual (a failure is `fail` in the store), and
act on a failure as on a warning: no drain, no blocked job. `slurmadm health observe` then reads
those results back and says, per check, which nodes it would have drained, how often, when last
and why, and whether that is more of the fleet at once than the drain breaker allows
(`health.drain_cap_fraction`): most likely a false positive to fix before the check is promoted
(`on_fail = "drain"`, or its default). Errors (the check could not run) are counted apart: under
`on_error = "fail"` they too would have drained.

This is the shadow-mode rollout fleet admins ask of NVSentinel, GCM and DCGM's thresholds
(`shared/anchors/what-fleet-admins-ask-2026-12.md`, part 4, item 8): a check's false positives
are found on the fleet's own history before they cost a drain.

Reads only: the store (`store/read.py`, every node's results from the central store when the site
has one) and the site.
"""

from __future__ import annotations

import time
from typing import Any

from ..hostlist import compress
from ..store.read import Reader
from .checks import BY_ID

DETAIL_MAX = 160


def observed(site) -> list[str]:
    """The ids of the checks the site runs in observe mode."""
    return [cid for cid in site.health.observed() if cid in BY_ID]


def on_fail(site, check_id: str) -> str:
    """The check's effective action on a failure at this site (its default, or the site's)."""
    over = site.health.checks.get(check_id)
    return (over.on_fail if over is not None and over.on_fail else None) or BY_ID[check_id].on_fail


def report(r: Reader, site, checks: list[str], *, since: float, now: float | None = None) -> list[dict[str, Any]]:
    """Per check (in `checks`' order): the nodes whose results since `since` failed it, each with
    its failing runs, its errors, first and last failure and the latest failure's detail; the
    breaker's verdict on that many nodes. A check no node failed is reported with no nodes."""
    now = time.time() if now is None else now
    fleet = site.node_names  # the share of the fleet a check would drain
    cap_fraction = site.health.drain_cap_fraction
    out = []
    for cid in checks:
        rows = r.query(
            "SELECT node, status, COUNT(*) AS n, MIN(ts) AS first, MAX(ts) AS last FROM check_results "
            f"WHERE {r.trusted()} AND check_id = ? AND ts >= ? AND status IN ('fail', 'error') "
            "GROUP BY node, status", [cid, since])
        nodes: dict[str, dict[str, Any]] = {}
        for row in rows:
            n = nodes.setdefault(str(row["node"]), {"node": str(row["node"]), "fails": 0, "errors": 0,
                                                     "first": None, "last": None, "detail": ""})
            n["fails" if row["status"] == "fail" else "errors"] += int(row["n"])
            if row["status"] == "fail":
                n["first"] = float(row["first"])
                n["last"] = float(row["last"])
        for n in nodes.values():
            if n["fails"]:
                last = r.query(f"SELECT detail FROM check_results WHERE {r.trusted()} AND check_id = ? AND node = ? "
                               "AND status = 'fail' AND ts >= ? ORDER BY ts DESC LIMIT 1", [cid, n["node"], since])
                n["detail"] = " ".join(str(last[0]["detail"]).split())[:DETAIL_MAX] if last else ""
        would = sorted(n["node"] for n in nodes.values() if n["fails"])
        share = len(would) / len(fleet) if fleet else 0.0
        out.append({
            "check_id": cid, "on_fail": on_fail(site, cid), "since": since, "until": now,
            "would_drain": would, "would_drain_count": len(would), "fleet": len(fleet),
            "share": round(share, 4), "over_breaker": share > cap_fraction, "drain_cap_fraction": cap_fraction,
            "fails": sum(n["fails"] for n in nodes.values()), "errors": sum(n["errors"] for n in nodes.values()),
            "nodes": sorted(nodes.values(), key=lambda n: (-n["fails"], n["node"])),
        })
    return out


def fold(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A check's node rows for people: nodes with the same fails, errors and detail share one row
    (a hostlist, the newest last failure), most failures first."""
    groups: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for n in nodes:
        groups.setdefault((n["fails"], n["errors"], n["detail"]), []).append(n)
    out = [{"nodes": compress([n["node"] for n in ns]), "count": len(ns), "fails": fails, "errors": errors,
            "last": max((n["last"] for n in ns if n["last"]), default=None), "detail": detail}
           for (fails, errors, detail), ns in groups.items()]
    return sorted(out, key=lambda g: (-g["fails"], -g["count"], g["nodes"]))


def verdict(row: dict[str, Any]) -> str:
    """One line on what promoting the check would do, from its report row."""
    if not row["would_drain"]:
        extra = f"; it could not run {row['errors']} time(s)" if row["errors"] else ""
        return f"would have drained no node{extra}"
    what = f"would have drained {row['would_drain_count']} of {row['fleet']} node(s) ({compress(row['would_drain'])})"
    if row["over_breaker"]:
        what += f": more than the breaker's {row['drain_cap_fraction']:.0%}, look for a false positive first"
    return what
