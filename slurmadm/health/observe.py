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

A new threshold needs no observe period where the check already stores the value it compares
(`WHAT_IF`: GPU temperature, corrected ECC, all-reduce bandwidth): `slurmadm health observe
--what-if max_gpu_temp_c=80` replays it on the values the fleet's runs stored, and says which nodes
it would have drained beside those the current threshold drains.

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


# ------------------------------------------------------------------------------ what-if thresholds
# A stricter (or looser) threshold replayed against the values the fleet's runs already stored
# (check_results.value): the thresholds whose check stores exactly the quantity it compares. key
# (health.models.<model>.<key>) -> (check, comparison that fails, unit, what the replay cannot see).
WHAT_IF: dict[str, tuple[str, str, str, str]] = {
    "max_gpu_temp_c": ("thermal", ">", "C", "the hottest GPU core of each run; HBM temperature is not replayed"),
    "ecc_corrected_volatile_max": ("ecc-corrected", ">", "errors",
                                   "each run's highest volatile corrected ECC count of one GPU"),
    "nccl_busbw_floor_gbps": ("nccl-allreduce", "<", "GB/s", "each run's 8-GPU all-reduce bus bandwidth"),
}


def parse_what_if(text: str) -> tuple[str, float]:
    """`KEY=VALUE` (`--what-if max_gpu_temp_c=80`) -> (key, value). ValueError: one line naming it."""
    key, sep, raw = text.partition("=")
    key = key.strip().removeprefix("health.models.*.")
    if not sep or key not in WHAT_IF:
        raise ValueError(f"--what-if {text!r}: KEY=VALUE with KEY one of {', '.join(WHAT_IF)}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--what-if {text!r}: {raw.strip()!r} is not a number") from None
    if not value == value or value < 0 or value in (float("inf"), float("-inf")):
        raise ValueError(f"--what-if {text!r}: {raw.strip()!r} is not a threshold")
    return key, value


def what_if(r: Reader, site, key: str, proposed: float, *, since: float,
            now: float | None = None) -> dict[str, Any]:
    """`key` at `proposed` for every GPU model, replayed on the check's stored values since `since`:
    per node, its runs, how many would fail at the proposed and at its model's current threshold,
    its worst value and when it last crossed the proposed one; the nodes that would be drained
    and the breaker's verdict on that many, beside the nodes the current threshold drains."""
    now = time.time() if now is None else now
    cid, op, unit, scope = WHAT_IF[key]
    worst = "MAX" if op == ">" else "MIN"
    by_model: dict[str, list[str]] = {}
    for name in site.node_names:
        by_model.setdefault(site.node_profile(name).gpus.model, []).append(name)
    current: dict[str, float] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for model, names in sorted(by_model.items()):
        limit = float(getattr(site.thresholds(model), key))
        current[model] = limit
        # one row per node (SQLite and MariaDB alike): its runs, those past each threshold, its worst
        rows = r.query(
            f"SELECT node, COUNT(*) AS runs, SUM(CASE WHEN value {op} ? THEN 1 ELSE 0 END) AS would, "
            f"SUM(CASE WHEN value {op} ? THEN 1 ELSE 0 END) AS now_, {worst}(value) AS worst, "
            f"MAX(CASE WHEN value {op} ? THEN ts END) AS last FROM check_results "
            f"WHERE {r.trusted()} AND check_id = ? AND ts >= ? AND value IS NOT NULL "
            f"AND status IN ('pass', 'warn', 'fail') AND node IN ({','.join('?' * len(names))}) GROUP BY node",
            [proposed, limit, proposed, cid, since, *names])
        for row in rows:
            nodes[str(row["node"])] = {
                "node": str(row["node"]), "model": model, "runs": int(row["runs"]),
                "would_fail": int(row["would"] or 0), "fail_now": int(row["now_"] or 0),
                "worst": float(row["worst"]), "current": limit,
                "last": float(row["last"]) if row["last"] is not None else None}
    fleet = site.node_names
    cap_fraction = site.health.drain_cap_fraction
    would = sorted(n["node"] for n in nodes.values() if n["would_fail"])
    now_drain = sorted(n["node"] for n in nodes.values() if n["fail_now"])
    share = len(would) / len(fleet) if fleet else 0.0
    return {
        "key": key, "check_id": cid, "op": op, "unit": unit, "scope": scope, "proposed": proposed,
        "current": sorted(set(current.values())), "since": since, "until": now,
        "nodes_seen": len(nodes), "runs": sum(n["runs"] for n in nodes.values()),
        "would_drain": would, "would_drain_count": len(would),
        "drains_now": now_drain, "drains_now_count": len(now_drain),
        "fleet": len(fleet), "share": round(share, 4), "over_breaker": share > cap_fraction,
        "drain_cap_fraction": cap_fraction,
        "nodes": sorted((n for n in nodes.values() if n["would_fail"] or n["fail_now"]),
                        key=lambda n: (-n["would_fail"], -n["worst"] if op == ">" else n["worst"], n["node"])),
    }


def what_if_verdict(row: dict[str, Any]) -> str:
    """One line (after the key): what the proposed threshold would have drained, beside the current one."""
    cur = "/".join(f"{c:g}" for c in row["current"]) or "-"
    head = (f"{row['proposed']:g} {row['unit']} (now {cur}) on {row['check_id']}'s "
            f"{row['runs']:,} run(s) of {row['nodes_seen']} node(s): ")
    if not row["nodes_seen"]:
        return head + "no stored value to replay"
    now = f"; at the current threshold {row['drains_now_count']}"
    if not row["would_drain"]:
        return head + "would have drained no node" + now
    what = (f"would have drained {row['would_drain_count']} of {row['fleet']} node(s) "
            f"({compress(row['would_drain'])}){now}")
    if row["over_breaker"]:
        what += f": more than the breaker's {row['drain_cap_fraction']:.0%}, look for a false positive first"
    return head + what
