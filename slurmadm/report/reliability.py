"""`slurmadm report reliability`: what faults cost over time, from Slurm's own accounting and the
store (issue 36).

Per day and per ISO week, in GPU-hours:
- **completed**: allocated to runs that ended COMPLETED;
- **lost by verdict**: allocated to failed runs (`jobs failures`: infrastructure, user, unknown);
- **other**: allocated to every other run (cancelled by their users, TIMEOUT, still running);
- **out of service by cause**: node-hours (x the node's GPUs) a node spent drained for an
  incident's class, in repair (reset, reboot, qualification), in RMA, in maintenance (a BMC power
  or firmware drain) or down (`bmc recover`'s down time); one cause per hour, in that order of
  precedence: rma, repair, drained, maintenance, down;
- **idle**: the rest of the fleet's GPU-hours.

Runs are clipped to each day; a failed run's GPU-hours count in full on the days it ran.

MTBF per node, per GPU model and per incident class: node-hours observed / incidents opened
(per node also counting infrastructure-failed runs without an incident as failures is left out:
one fault kills many runs). MTTR per class: mean open-to-close time of the incidents closed in
the window.

ETTR (Kokolis et al., HPCA 2025, section III: Effective Training Time Ratio, productive runtime
over the wall-clock time a job was in the system from its first start): here per job over its
runs, GPU-weighted over the fleet. Assumptions, stated on the page: without checkpoint data a
failed run's whole time counts as lost (no work saved); a job's wall time runs from its first
run's start to its last run's end, so the wait between a failed run and its requeued run counts
against it; the first queue wait does not; jobs still running count up to now.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..hostlist import expand
from ..jobs.failures import VERDICTS, Attributed
from ..slurm.sacct import JobRun

DAY = 86400.0
CAUSES = ("rma", "repair", "drained", "maintenance", "down")  # precedence, highest first
REPAIR_STATES = ("resetting", "rebooting", "qualifying")
ETTR_ASSUMPTIONS = (
    "no checkpoint data: a failed run's whole time counts as lost",
    ("a job's wall time runs from its first run's start to its last run's end (the wait before a requeued "
     "run counts against it, the first queue wait does not)"),
    "GPU-weighted over every job with a run in the window; runs still going count up to now",
)


def _day(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d")


def _week(day: str) -> str:
    y, w, _ = dt.date.fromisoformat(day).isocalendar()
    return f"{y}-W{w:02d}"


def _days(since: float, until: float) -> list[tuple[str, float, float]]:
    """(day, start, end) of each local calendar day in [since, until], clipped."""
    out = []
    d = dt.datetime.fromtimestamp(since).replace(hour=0, minute=0, second=0, microsecond=0)
    while d.timestamp() < until:
        nxt = d + dt.timedelta(days=1)
        lo, hi = max(d.timestamp(), since), min(nxt.timestamp(), until)
        if hi > lo:
            out.append((d.strftime("%Y-%m-%d"), lo, hi))
        d = nxt
    return out


def _spread(into: dict[str, dict[str, float]], key: str, gpus: float, lo: float, hi: float,
            days: list[tuple[str, float, float]]) -> None:
    for day, a, b in days:
        s, e = max(lo, a), min(hi, b)
        if e > s:
            into[day][key] += gpus * (e - s) / 3600.0


# ------------------------------------------------------------------------------ out of service


def _incident_rows(store, since: float, until: float) -> list[dict[str, Any]]:
    try:
        return store.query("SELECT id, node, part_kind, part_key, class, state, opened_ts, closed_ts, updated_ts "
                           "FROM incidents WHERE opened_ts <= ? AND (closed_ts IS NULL OR closed_ts >= ?)",
                           (until, since))
    except Exception:  # noqa: BLE001 - a store before v5 has no incidents
        return []


def _incident_steps(store, ids: list[str]) -> dict[str, list[tuple[float, str]]]:
    out: dict[str, list[tuple[float, str]]] = defaultdict(list)
    if not ids:
        return out
    try:
        rows = store.query("SELECT incident_id, ts, state FROM incident_events WHERE kind IN ('step', 'cleared') "
                           "ORDER BY ts", ())
    except Exception:  # noqa: BLE001
        return out
    wanted = set(ids)
    for r in rows:
        if str(r["incident_id"]) in wanted:
            out[str(r["incident_id"])].append((float(r["ts"]), str(r["state"])))
    return out


def out_of_service(store, nodes: Iterable[str], since: float, until: float) -> dict[str, list[tuple[float, float, str, str]]]:
    """node -> [(start, end, cause, detail)] (cause one of CAUSES; detail the class or check)."""
    known = set(nodes)
    spans: dict[str, list[tuple[float, float, str, str]]] = defaultdict(list)
    rows = [r for r in _incident_rows(store, since, until) if r["node"] in known and r["part_kind"] != "leaf"]
    steps = _incident_steps(store, [str(r["id"]) for r in rows])
    for r in rows:
        start = float(r["opened_ts"])
        end = float(r["closed_ts"]) if r["closed_ts"] is not None else until
        cls = str(r["class"])
        cur, cause = start, "drained"
        for ts, state in steps.get(str(r["id"]), []):
            if ts <= cur:
                cause = _cause(state, cause)
                continue
            spans[r["node"]].append((cur, min(ts, end), cause, cls))
            cur, cause = min(ts, end), _cause(state, cause)
        if not steps.get(str(r["id"])) and r["state"] in ("rma", "lemon"):
            cause = "rma"
        if end > cur:
            spans[r["node"]].append((cur, end, cause, cls))
    # drains without an incident (health/BMC drains, firmware and power maintenance): drain to resume
    events = store.query("SELECT ts, action, target, reason, detail FROM events WHERE ts BETWEEN ? AND ? "
                         "AND action IN ('node.drain', 'node.resume', 'bmc.drain', 'bmc.recover.cycle', "
                         "'bmc.recover.resume', 'bmc.power') ORDER BY ts", (since - 30 * DAY, until))
    open_: dict[str, tuple[float, str, str]] = {}
    covered = {n for n in spans}
    for e in events:
        node, action, ts = e["target"], e["action"], float(e["ts"])
        if node not in known:
            continue
        if action in ("node.drain", "bmc.drain"):
            if node not in open_:
                cause = "maintenance" if action == "bmc.drain" else "drained"
                check = _check_of(e["reason"] or "") if action == "node.drain" else "bmc"
                open_[node] = (ts, cause, check)
        elif action in ("node.resume", "bmc.recover.resume"):
            if node in open_:
                s, cause, check = open_.pop(node)
                if node not in covered or cause == "maintenance":
                    spans[node].append((s, ts, cause, check))
        elif action == "bmc.recover.cycle":
            try:
                down_for = float(json.loads(e["detail"] or "{}").get("down_for") or 0)
            except (ValueError, TypeError, AttributeError):
                down_for = 0.0
            if down_for > 0:
                spans[node].append((ts - down_for, ts, "down", "bmc recover"))
    for node, (s, cause, check) in open_.items():
        if node not in covered or cause == "maintenance":
            spans[node].append((s, until, cause, check))
    return {n: _flatten(v, since, until) for n, v in spans.items()}


def _cause(state: str, current: str) -> str:
    if state in ("rma", "lemon"):
        return "rma"
    if state in REPAIR_STATES:
        return "repair"
    return current


def _check_of(reason: str) -> str:
    from ..slurm.ownership import reason_check_id

    return reason_check_id(reason) or "other"


def _flatten(spans: list[tuple[float, float, str, str]], since: float, until: float) -> list[tuple[float, float, str, str]]:
    """Overlapping spans of one node -> disjoint ones, the higher-precedence cause winning."""
    cuts = sorted({max(since, min(until, t)) for s, e, _, _ in spans for t in (s, e)})
    out: list[tuple[float, float, str, str]] = []
    for a, b in itertools.pairwise(cuts):
        live = [(CAUSES.index(c), c, d) for s, e, c, d in spans if s <= a and e >= b]
        if not live:
            continue
        _, cause, detail = min(live)
        if out and out[-1][1] == a and out[-1][2] == cause and out[-1][3] == detail:
            out[-1] = (out[-1][0], b, cause, detail)
        else:
            out.append((a, b, cause, detail))
    return out


# ------------------------------------------------------------------------------ the report


def _gpus_per_node(site) -> dict[str, int]:
    out = {}
    for n in site.node_names:
        try:
            out[n] = int(site.node_profile(n).gpus.count)
        except Exception:  # noqa: BLE001 - a site model without per-node GPUs: 8
            out[n] = 8
    return out


def _model_of(site) -> dict[str, str]:
    out = {}
    for n in site.node_names:
        try:
            out[n] = str(site.node_profile(n).gpus.model)
        except Exception:  # noqa: BLE001
            out[n] = "unknown"
    return out


def build(site, runs: list[JobRun], attributed: list[Attributed], store, since: float,
          until: float | None = None, *, top: int = 10) -> dict[str, Any]:
    until = time.time() if until is None else until
    gpus = _gpus_per_node(site)
    models = _model_of(site)
    nodes = list(gpus)
    days = _days(since, until)
    verdict_of = {id(a.run): a for a in attributed}
    per_day: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in runs:
        if r.start is None or not r.gpus:
            continue
        end = r.end if r.end is not None else until
        a = verdict_of.get(id(r))
        key = "completed" if r.state == "COMPLETED" else f"lost_{a.verdict}" if a is not None else "other"
        _spread(per_day, key, r.gpus, r.start, end, days)
        _spread(per_day, "allocated", r.gpus, r.start, end, days)
    oos = out_of_service(store, nodes, since, until)
    node_oos_h: dict[str, float] = defaultdict(float)
    for node, spans in oos.items():
        for s, e, cause, detail in spans:
            key = f"out_{cause}" if cause != "drained" else f"out_drained:{detail}"
            _spread(per_day, key, gpus.get(node, 8), s, e, days)
            _spread(per_day, "out_of_service", gpus.get(node, 8), s, e, days)
            node_oos_h[node] += gpus.get(node, 8) * (e - s) / 3600.0
    fleet_gpus = sum(gpus.values())
    rows = []
    for day, lo, hi in days:
        d = per_day[day]
        total = fleet_gpus * (hi - lo) / 3600.0
        d["total"] = total
        d["idle"] = max(0.0, total - d["allocated"] - d["out_of_service"])
        rows.append({"day": day, **{k: round(v, 3) for k, v in sorted(d.items())}})
    weeks: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        for k, v in row.items():
            if k != "day":
                weeks[_week(row["day"])][k] += v
    week_rows = [{"week": w, **{k: round(v, 3) for k, v in sorted(x.items())}} for w, x in sorted(weeks.items())]

    incidents = [r for r in _incident_rows(store, since, until) if r["part_kind"] != "leaf"]
    opened = [r for r in incidents if float(r["opened_ts"]) >= since]
    hours = (until - since) / 3600.0
    by_node = defaultdict(int)
    by_model = defaultdict(int)
    by_class = defaultdict(int)
    for r in opened:
        by_node[r["node"]] += 1
        by_model[models.get(r["node"], "unknown")] += 1
        by_class[str(r["class"])] += 1
    model_nodes = defaultdict(int)
    for n in nodes:
        model_nodes[models[n]] += 1
    mtbf = {
        "node": {n: round(hours / c, 2) for n, c in sorted(by_node.items())},
        "model": {m: round(hours * model_nodes[m] / by_model[m], 2) if by_model[m] else None
                  for m in sorted(model_nodes)},
        "class": {c: round(hours * len(nodes) / k, 2) for c, k in sorted(by_class.items())},
        "fleet": round(hours * len(nodes) / len(opened), 2) if opened else None,
    }
    repair_times = defaultdict(list)
    for r in incidents:
        if r["closed_ts"] is not None and since <= float(r["closed_ts"]) <= until:
            repair_times[str(r["class"])].append((float(r["closed_ts"]) - float(r["opened_ts"])) / 3600.0)
    mttr = {c: round(sum(v) / len(v), 2) for c, v in sorted(repair_times.items())}

    lost_by_node: dict[str, float] = defaultdict(float)
    for a in attributed:
        if a.verdict == "infrastructure" and a.signals:
            blamed = sorted({s.node for s in a.signals})
            for n in blamed:
                lost_by_node[n] += a.run.gpu_hours / len(blamed)
        elif a.verdict == "infrastructure" and a.run.nodes:
            ns = expand(a.run.nodes)
            for n in ns:
                lost_by_node[n] += a.run.gpu_hours / len(ns)
    cost = sorted(({"node": n, "lost_gpu_hours": round(lost_by_node.get(n, 0.0), 3),
                    "out_of_service_gpu_hours": round(node_oos_h.get(n, 0.0), 3),
                    "incidents": by_node.get(n, 0),
                    "cost_gpu_hours": round(lost_by_node.get(n, 0.0) + node_oos_h.get(n, 0.0), 3)}
                   for n in set(lost_by_node) | set(node_oos_h)), key=lambda x: (-x["cost_gpu_hours"], x["node"]))
    totals = defaultdict(float)
    for row in rows:
        for k, v in row.items():
            if k != "day":
                totals[k] += v
    return {"since": since, "until": until, "nodes": len(nodes), "gpus": fleet_gpus,
            "runs": len(runs), "failed_runs": len(attributed),
            "totals": {k: round(v, 3) for k, v in sorted(totals.items())},
            "days": rows, "weeks": week_rows, "mtbf_hours": mtbf, "mttr_hours": mttr,
            "ettr": ettr(runs, attributed, until), "costliest_nodes": cost[:top],
            "verdicts": _verdict_counts(attributed), "rma": rma_figures(store, since)}


def rma_figures(store, since: float) -> dict[str, Any] | None:
    """The RMA cases' figures over the window (repair/rma.py `figures`: fault to RMA, the
    vendor's turnaround, per GPU model and class); None for a store before RMA cases."""
    from ..repair import rma

    try:
        return rma.figures(store, since)
    except Exception:  # noqa: BLE001 - a store before v-rma has no rma_cases table
        return None


def _verdict_counts(attributed: list[Attributed]) -> dict[str, int]:
    """Failed runs per verdict, every verdict present (a quiet day counts 0, not "no data")."""
    out: dict[str, int] = dict.fromkeys(VERDICTS, 0)
    for a in attributed:
        out[a.verdict] += 1
    return dict(sorted(out.items()))


def ettr(runs: list[JobRun], attributed: list[Attributed], now: float) -> dict[str, Any]:
    """Meta's ETTR, GPU-weighted over jobs, with its assumptions."""
    lost = {id(a.run) for a in attributed}
    jobs: dict[str, list[JobRun]] = defaultdict(list)
    for r in runs:
        if r.start is not None and r.gpus:
            jobs[r.job_id].append(r)
    productive = wall = 0.0
    for rs in jobs.values():
        first = min(r.start for r in rs)
        last = max((r.end if r.end is not None else now) for r in rs)
        g = max(r.gpus for r in rs)
        wall += g * max(0.0, last - first)
        productive += sum(r.gpus * r.elapsed_s for r in rs if id(r) not in lost)
    return {"value": round(productive / wall, 4) if wall else None, "jobs": len(jobs),
            "productive_gpu_hours": round(productive / 3600, 3), "wall_gpu_hours": round(wall / 3600, 3),
            "assumptions": list(ETTR_ASSUMPTIONS)}


def today(report: dict[str, Any]) -> dict[str, float]:
    """The last day's figures (what the exporter carries)."""
    return {k: v for k, v in (report["days"][-1] if report["days"] else {}).items() if k != "day"}


COST_REFRESH_S = 600.0  # the exporter recomputes the day's figures this often (one sacct of today)


def today_figures(site, now: float | None = None, *, sacct=None) -> dict[str, Any]:
    """The figures of the day so far (since local midnight): what the head exporter carries."""
    from ..jobs import failures
    from ..store import read

    now = time.time() if now is None else now
    midnight = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    runs, attributed = failures.collect(site, midnight, sacct=sacct)
    with read.trusted(site) as r:
        rep = build(site, runs, attributed, r, midnight, now)
    return {"day": _day(midnight), "gpu_hours": today(rep), "ettr": rep["ettr"]["value"],
            "failed_runs": rep["verdicts"]}
