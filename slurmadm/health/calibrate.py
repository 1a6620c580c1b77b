"""The fleet's NCCL all-reduce bus bandwidth per GPU model, and a floor to suggest from it.

Two sources, newest result per node wins:
- `check_results` rows of `nccl-allreduce` that passed: a store the nodes write to (one shared
  store, or the head node's own runs of `health run`);
- `burnin_nodes.busbw` of nodes that passed a burn-in sweep: the nightly sweep runs from the head
  node and collects every node's single-node all-reduce into the head's store, so on a cluster
  whose nodes each keep a local store this is the fleet-wide collection.
A node below the floor is no yardstick: only passing results count.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..site import Site


def latest_busbw(store, since: float) -> dict[str, tuple[float, float, str]]:
    """node -> (ts, GB/s, source) of its newest passing single-node all-reduce since `since`.
    `store`: a local Store or a central store's reader (anything with `.query`)."""
    from ..store.read import trusted_sql

    ok = trusted_sql(store)  # a node's account's rows about another node do not count (issue 24)
    rows = store.query(
        "SELECT node, value AS busbw, ts, 'health' AS source FROM check_results "
        f"WHERE check_id = 'nccl-allreduce' AND status = 'pass' AND value IS NOT NULL AND ts >= ? AND {ok} "
        "UNION ALL "
        "SELECT node, busbw, ts, 'burn-in' FROM burnin_nodes "
        f"WHERE verdict = 'pass' AND busbw IS NOT NULL AND ts >= ? AND {ok} "
        "ORDER BY ts", (since, since))
    return {r["node"]: (r["ts"], r["busbw"], r["source"]) for r in rows}


def calibrate(site: Site, store, since: float, margin: float, model: str | None = None) -> list[dict[str, Any]]:
    model_of = {n: site.node_profile(n).gpus.model for n in site.node_names}
    latest = latest_busbw(store, since)
    out = []
    for m in sorted({model_of[n] for n in latest if n in model_of}):
        if model and m != model:
            continue
        mine = [latest[n] for n in latest if model_of.get(n) == m]
        values = [bw for _, bw, _ in mine]
        median = statistics.median(values)
        out.append({"model": m, "nodes": len(values), "median_gbps": round(median, 1),
                    "min_gbps": round(min(values), 1), "max_gbps": round(max(values), 1),
                    "from_health_checks": sum(1 for *_, src in mine if src == "health"),
                    "from_burnin": sum(1 for *_, src in mine if src == "burn-in"),
                    "current_floor_gbps": site.thresholds(m).nccl_busbw_floor_gbps,
                    "suggested_floor_gbps": round(median * (1 - margin), 1)})
    return out
