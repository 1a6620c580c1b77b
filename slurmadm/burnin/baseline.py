"""Baselines per hardware profile (`slurmadm burnin baseline show|set|reset`).

A baseline is, per profile and metric (burnin/fleet.py METRICS), the median and MAD of a sweep
that passed. The first passed sweep with fleet verdicts seeds it (sweep.py); after that it
changes only through `burnin baseline set` (from a sweep, or from a file: a new site can start
from another site's numbers) or `reset`, so a fleet that degrades together is judged against
what it measured when it was good.

The file format is what `burnin baseline show --json` prints:

    {"baselines": {"hgx-b200": {"stress-tflops": {"median": 1004.0, "mad": 2.0, "nodes": 8}, ...}}}
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..site import Site
from ..store import Store
from . import fleet, history


def show(store) -> dict[str, Any]:
    return {"baselines": history.baselines(store)}


def read_file(path: str, site: Site) -> dict[str, dict[str, dict[str, Any]]]:
    """Baselines from a file; any problem is one line naming the file and the key."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None
    rows = data.get("baselines") if isinstance(data, dict) else None
    if not isinstance(rows, dict) or not rows:
        raise UsageError(f"{path}: expected {{\"baselines\": {{PROFILE: {{METRIC: {{\"median\": ...}}}}}}}}")
    profiles = {g.profile for g in site.nodes}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for profile, metrics in rows.items():
        if profile not in profiles:
            raise UsageError(f"{path}: baselines.{profile}: no node of the site has this profile "
                             f"(profiles in use: {', '.join(sorted(profiles))})")
        if not isinstance(metrics, dict):
            raise UsageError(f"{path}: baselines.{profile}: expected an object of metrics")
        for metric, b in metrics.items():
            where = f"{path}: baselines.{profile}.{metric}"
            if metric not in fleet.METRICS:
                raise UsageError(f"{where}: unknown metric (known: {', '.join(fleet.METRICS)})")
            if not isinstance(b, dict):
                raise UsageError(f"{where}: expected {{\"median\": ..., \"mad\": ..., \"nodes\": ...}}")
            med, mad, nodes = b.get("median"), b.get("mad", 0), b.get("nodes", 0)
            if fleet.METRICS[metric].kind == "count":  # an error count's median is mostly 0
                if not _number(med) or med < 0:
                    raise UsageError(f"{where}.median: {med!r} is not a number >= 0")
            elif not _number(med) or med <= 0:
                raise UsageError(f"{where}.median: {med!r} is not a positive number")
            if not _number(mad) or mad < 0:
                raise UsageError(f"{where}.mad: {mad!r} is not a number >= 0")
            if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0:
                raise UsageError(f"{where}.nodes: {nodes!r} is not a whole number >= 0")
            out.setdefault(profile, {})[metric] = {"median": float(med), "mad": float(mad), "nodes": nodes}
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def from_sweep(store: Store, sweep_id: str | None) -> tuple[str, dict[str, dict[str, dict[str, Any]]]]:
    """(sweep id, baselines) of a sweep that passed (default: the newest one with fleet data)."""
    if sweep_id:
        rows = store.query("SELECT id, status, summary FROM burnin_sweeps WHERE id = ?", (sweep_id,))
        if not rows:
            raise UsageError(f"--sweep {sweep_id}: no such sweep in the store")
    else:
        rows = store.query("SELECT id, status, summary FROM burnin_sweeps WHERE status = 'done' "
                           "ORDER BY started DESC LIMIT 50")
    for r in rows:
        summary = json.loads(r["summary"] or "{}")
        groups = (summary.get("fleet") or {}).get("groups")
        passed = r["status"] == "done" and summary.get("exit_code") == 0 and not any(
            (n.get("fleet") or {}).get("level") == "slow" for n in summary.get("nodes") or [])
        if groups and passed:
            return r["id"], fleet.baseline_from({"groups": groups})
        if sweep_id:
            why = "it did not pass (a failure or a straggler)" if not passed else "it has no fleet verdicts (burnin.straggler off, or too few nodes)"
            raise UsageError(f"--sweep {sweep_id}: cannot be a baseline: {why}")
    raise UsageError("no passed sweep with fleet verdicts in the store: run `slurmadm burnin run`, "
                     "or give --from FILE")


def plan_set(store: Store, site: Site, *, from_file: str | None, sweep_id: str | None) -> dict[str, Any]:
    if from_file and sweep_id:
        raise UsageError("--from and --sweep: give one")
    if from_file:
        new, source = read_file(from_file, site), f"file {Path(from_file).resolve()}"
    else:
        sid, new = from_sweep(store, sweep_id)
        source = f"sweep {sid}"
        if not new:
            raise UsageError(f"sweep {sid}: no profile had enough nodes (burnin.straggler.min_nodes) for a baseline")
    old = history.baselines(store)
    changes = []
    for profile, metrics in sorted(new.items()):
        for metric, b in sorted(metrics.items()):
            before = (old.get(profile) or {}).get(metric)
            changes.append({"profile": profile, "metric": metric, "median": b["median"], "mad": b["mad"],
                            "nodes": b["nodes"], "was": before["median"] if before else None})
    return {"source": source, "baselines": new, "changes": changes}


def apply_set(store: Store, plan: dict[str, Any], *, reason: str) -> None:
    history.set_baselines(store, plan["baselines"], source=plan["source"])
    store.audit_many([("burnin.baseline.set", c["profile"], reason,
                       {"metric": c["metric"], "median": c["median"], "was": c["was"], "source": plan["source"]})
                      for c in plan["changes"]])


def plan_reset(store, profile: str | None) -> dict[str, Any]:
    have = history.baselines(store)
    if profile and profile not in have:
        raise UsageError(f"--profile {profile}: no baseline kept for it"
                         + (f" (kept: {', '.join(sorted(have))})" if have else " (none kept)"))
    gone = {p: sorted(m) for p, m in have.items() if not profile or p == profile}
    return {"profile": profile, "removes": gone}


def apply_reset(store: Store, plan: dict[str, Any], *, reason: str) -> int:
    n = history.reset_baselines(store, plan["profile"])
    if plan["removes"]:
        store.audit_many([("burnin.baseline.reset", p, reason, {"metrics": m}) for p, m in plan["removes"].items()])
    return n
