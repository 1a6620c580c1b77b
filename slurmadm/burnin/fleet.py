"""Fleet-relative verdicts: stragglers, nodes that pass every check but are slower than their peers.

Pure statistics over a sweep's JSON summary (no Slurm, no store): for each metric the sweep
measures (METRICS), each node's value is compared with the median of the nodes of the same
hardware profile in the same sweep, with the median of its scalable unit (same profile), and
with the profile's baseline (kept in the store from sweeps that passed, `burnin baseline`).

Robust statistics: the median and the median absolute deviation (MAD), never the mean and
standard deviation, which one bad node drags. A node is flagged on a metric when its share of
the median is past the site's threshold (`burnin.straggler.warn_percent` / `fail_percent`) AND,
when the group's MAD is not zero, it lies at least `mad_k` robust deviations (1.4826 x MAD) away
on the bad side: a wide, noisy fleet does not flag its ordinary spread. A group smaller than
`min_nodes` gives no verdict (a fleet of 2 cannot tell which of the two is slow).

Direction: throughput, bandwidth and clocks are higher-is-better; temperatures lower-is-better
(a node 15% hotter than the fleet under the same load is the HBM stack that throttles next).

Levels per node and metric: ok | warn | slow | none (no verdict: too few peers, no value).
Only nodes whose own tests passed enter the distribution and get a verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of a normal distribution
LEVELS = ("none", "ok", "warn", "slow")  # in increasing severity


@dataclass(frozen=True)
class Metric:
    id: str
    label: str
    unit: str
    higher_is_better: bool
    what: str
    kind: str = "rate"  # rate: judged as a share of the median; count: an error count (see judge_count)


# The metric ids are also the values burnin.straggler.metrics accepts (site/burnin.py FleetMetric).
METRICS: dict[str, Metric] = {m.id: m for m in (
    Metric("stress-tflops", "GPU matmul", "TFLOPS", True, "slowest GPU's bf16 matmul rate under the stress load"),
    Metric("stress-copy", "GPU memory copy", "GB/s", True, "slowest GPU's device-to-device copy rate"),
    Metric("stress-cpu", "CPU stand-in", "GB/s (CPU)", True, "CPU stand-in copy rate (no GPU stressed)"),
    Metric("gpu-clock", "SM clock under load", "MHz", True, "lowest GPU SM clock at the end of the stress load"),
    Metric("gpu-temp", "GPU temperature under load", "C", False, "hottest GPU at the end of the stress load"),
    Metric("allreduce-node", "single-node all-reduce", "GB/s", True, "single-node all-reduce bus bandwidth"),
    Metric("allreduce-pair", "two-node all-reduce", "GB/s", True, "median bus bandwidth of the node's pair tests"),
    Metric("hca-rate", "InfiniBand port rate", "Gb/s", True, "slowest compute HCA port's link rate"),
    Metric("thermal", "hottest GPU after load", "C", False, "health check thermal: hottest GPU after the load"),
    *(Metric(mid, label, "errors", False, f"worst compute HCA port's {counter} rise over the burn-in job", "count")
      for mid, (counter, label) in {
          "hca-symbol-errors": ("symbol_error", "InfiniBand symbol errors"),
          "hca-link-recovery": ("link_error_recovery", "InfiniBand link retrains"),
          "hca-link-downed": ("link_downed", "InfiniBand link downs"),
          "hca-rcv-errors": ("port_rcv_errors", "InfiniBand receive errors"),
      }.items()),
)}

# Error counters as fleet metrics (kind "count"): the rise of each sysfs counter
# (class/infiniband/<hca>/ports/<port>/counters/<counter>) over the burn-in job, the worst compute
# HCA port of the node. A healthy fleet's median rise is 0, so a share of the median means
# nothing; a count is judged against an allowance instead (judge_count):
#   allowance = max(COUNT_FLOORS[metric], COUNT_FACTOR x median), and, when the fleet's MAD is
#   not 0, at least mad_k robust deviations above the median.
# A rise at or past the allowance is a warning, never `slow`: errors show a marginal cable or
# transceiver, not by themselves a slow node (hca-rate and the all-reduces measure that), and
# the hard limits are the `infiniband` health check's (health.ib_counter_rise_max, which fails
# the node). The floors are the rise over one burn-in job below which a port is never singled
# out: a few symbol or receive errors in an hour of full load are within the IBTA bit-error-rate
# budget (1e-12 at 400 Gb/s is ~1.4 errors an hour), one retrain or link down is not.
COUNT_FLOORS: dict[str, float] = {"hca-symbol-errors": 10, "hca-rcv-errors": 10, "hca-link-recovery": 1,
                                  "hca-link-downed": 1}
COUNT_FACTOR = 2.0
COUNTER_OF = {"hca-symbol-errors": "symbol_error", "hca-link-recovery": "link_error_recovery",
              "hca-link-downed": "link_downed", "hca-rcv-errors": "port_rcv_errors"}


@dataclass(frozen=True)
class Settings:
    warn_percent: float = 92.0
    fail_percent: float = 85.0
    min_nodes: int = 4
    mad_k: float = 3.0
    metrics: tuple[str, ...] = tuple(METRICS)

    @classmethod
    def from_site(cls, section: Any) -> "Settings":
        """From burnin.straggler of the site model."""
        return cls(section.warn_percent, section.fail_percent, section.min_nodes, section.mad_k,
                   tuple(section.metrics))


# ------------------------------------------------------------------------------ extraction


def _per_gpu(test: dict[str, Any], key: str) -> list[float]:
    per = (test.get("data") or {}).get("per_gpu") or {}
    return [float(r[key]) for r in per.values() if isinstance(r, dict) and isinstance(r.get(key), (int, float))
            and not isinstance(r.get(key), bool) and not r.get("error")]


def node_values(node: dict[str, Any], pairs: Iterable[dict[str, Any]] = ()) -> dict[str, float]:
    """metric id -> this node's value, from one node's summary entry (tests as recorded) and the
    sweep's pair results. Metrics the node did not measure are absent."""
    out: dict[str, float] = {}
    for t in node.get("tests") or []:
        test, data = t.get("test"), t.get("data") or {}
        if test == "stress" and t.get("status") in ("pass", "warn"):
            if data.get("device") == "cpu":
                if isinstance(t.get("value"), (int, float)):
                    out["stress-cpu"] = float(t["value"])
                if not data.get("per_gpu"):  # the dev cluster's stand-in GPUs give theirs (burnin/node.py)
                    continue
            for metric, key, pick in (("stress-tflops", "tflops", min), ("stress-copy", "copy_gbps", min),
                                      ("gpu-clock", "sm_clock_mhz", min), ("gpu-temp", "temp_c", max)):
                values = _per_gpu(t, key)
                if values:
                    out[metric] = pick(values)
        elif test == "fabric" and t.get("status") == "pass":
            rates = [float(v) for v in (data.get("per_hca") or {}).values()
                     if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
            if rates:
                out["hca-rate"] = min(rates)
        if test == "fabric" and t.get("status") in ("pass", "warn"):
            rise = data.get("counter_rise") or {}
            for metric, counter in COUNTER_OF.items():
                seen = [float(c[counter]) for c in rise.values() if isinstance(c, dict)
                        and isinstance(c.get(counter), (int, float)) and not isinstance(c.get(counter), bool)]
                if seen:
                    out[metric] = max(seen)
        elif test == "allreduce-node" and t.get("status") == "pass" and isinstance(t.get("value"), (int, float)):
            out["allreduce-node"] = float(t["value"])
        elif test == "health":
            for c in data.get("checks") or []:
                cid = c.get("check_id") or c.get("check") or c.get("id")
                v = c.get("value")
                if cid == "thermal" and c.get("status") == "pass" and isinstance(v, (int, float)) and v > 0:
                    out["thermal"] = float(v)
    mine = [float(p["busbw_gbps"]) for p in pairs if node.get("node") in (p.get("a"), p.get("b"))
            and p.get("status") == "pass" and isinstance(p.get("busbw_gbps"), (int, float))]
    if mine:
        out["allreduce-pair"] = statistics.median(mine)
    return out


# ------------------------------------------------------------------------------ statistics


def robust(values: Iterable[float]) -> tuple[float, float]:
    """(median, MAD) of the values."""
    vals = list(values)
    med = statistics.median(vals)
    return med, statistics.median(abs(v - med) for v in vals)


def judge_count(value: float, median: float, mad: float, metric: Metric, s: Settings) -> dict[str, Any]:
    """An error count (kind "count") against a reference: `limit` is the allowance (see
    COUNT_FLOORS), `share` stays None (a share of a median of 0 means nothing); ok | warn."""
    limit = max(COUNT_FLOORS.get(metric.id, 1.0), COUNT_FACTOR * median)
    z = (value - median) / (MAD_SCALE * mad) if mad > 0 else None
    spread_ok = z is None or z >= s.mad_k
    level = "warn" if value >= limit and spread_ok else "ok"
    return {"share": None, "z": round(z, 2) if z is not None else None, "level": level, "limit": limit}


def judge(value: float, median: float, mad: float, metric: Metric, s: Settings) -> dict[str, Any]:
    """One value against one reference (a fleet group or a baseline): share of the median (1.0 =
    the median), robust z (signed, positive = worse), and the level."""
    if metric.kind == "count":
        return judge_count(value, median, mad, metric, s)
    share = value / median if median else None
    z = None
    if mad > 0:
        z = (median - value if metric.higher_is_better else value - median) / (MAD_SCALE * mad)
    if share is None:
        return {"share": None, "z": z, "level": "none"}
    pct = share * 100
    warn_at, fail_at = s.warn_percent, s.fail_percent
    if metric.higher_is_better:
        past_fail, past_warn = pct < fail_at, pct < warn_at
    else:
        past_fail, past_warn = pct > 200 - fail_at, pct > 200 - warn_at
    spread_ok = z is None or z >= s.mad_k  # MAD 0: everyone else identical, the share decides
    level = "slow" if past_fail and spread_ok else "warn" if past_warn and spread_ok else "ok"
    return {"share": round(share, 4), "z": round(z, 2) if z is not None else None, "level": level}


def _worse(a: str, b: str) -> str:
    return a if LEVELS.index(a) >= LEVELS.index(b) else b


def evaluate(summary: dict[str, Any], *, profile_of: dict[str, str], unit_of: dict[str, str],
             settings: Settings, baselines: dict[str, dict[str, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Fleet-relative verdicts for one sweep.

    `profile_of`/`unit_of`: node -> hardware profile / scalable unit name. `baselines`:
    profile -> metric -> {"median", "mad", "nodes", ...} (None or {}: none kept).
    Returns {"nodes": {node: {"level", "profile", "unit", "metrics": {metric: {...}}, "worst"}},
    "groups": [{"profile", "unit", "metric", "median", "mad", "nodes", "values"}],
    "fleet": [profile-wide medians against their baseline], "settings": {...}}."""
    baselines = baselines or {}
    pairs = summary.get("pairs") or []
    values: dict[str, dict[str, float]] = {}
    for n in summary.get("nodes") or []:
        if n.get("verdict") == "pass":
            values[n["node"]] = {k: v for k, v in node_values(n, pairs).items() if k in settings.metrics}
    groups: list[dict[str, Any]] = []
    ref: dict[tuple[str, str, str], dict[str, Any]] = {}  # (profile, unit or "", metric) -> group
    for metric in settings.metrics:
        by_profile: dict[str, dict[str, float]] = {}
        for node, vals in values.items():
            if metric in vals:
                by_profile.setdefault(profile_of.get(node, "?"), {})[node] = vals[metric]
        for profile, members in sorted(by_profile.items()):
            scopes = [("", members)]
            by_unit: dict[str, dict[str, float]] = {}
            for node, v in members.items():
                by_unit.setdefault(unit_of.get(node, ""), {})[node] = v
            if len(by_unit) > 1:  # one unit only: the unit group is the profile group
                scopes += sorted((u, m) for u, m in by_unit.items() if u)
            for unit, mem in scopes:
                med, mad = robust(mem.values())
                g = {"profile": profile, "unit": unit, "metric": metric, "median": round(med, 6),
                     "mad": round(mad, 6), "nodes": len(mem), "values": dict(sorted(mem.items())),
                     "judged": len(mem) >= settings.min_nodes}
                groups.append(g)
                ref[(profile, unit, metric)] = g
    nodes: dict[str, dict[str, Any]] = {}
    for node, vals in values.items():
        profile, unit = profile_of.get(node, "?"), unit_of.get(node, "")
        entry: dict[str, Any] = {"level": "none", "profile": profile, "unit": unit, "metrics": {}, "worst": None}
        for metric, value in vals.items():
            m = METRICS[metric]
            row: dict[str, Any] = {"value": value, "unit": m.unit, "level": "none"}
            for scope, key in (("fleet", (profile, "", metric)), ("su", (profile, unit, metric))):
                g = ref.get(key)
                if g is None or (scope == "su" and not unit):
                    continue
                if scope == "su" and g["nodes"] == ref[(profile, "", metric)]["nodes"]:
                    continue  # the unit is the whole profile group
                verdict = judge(value, g["median"], g["mad"], m, settings) if g["judged"] else \
                    {"share": round(value / g["median"], 4) if g["median"] and m.kind != "count" else None,
                     "z": None, "level": "none"}
                row[scope] = {"median": g["median"], "mad": g["mad"], "nodes": g["nodes"], **verdict}
                row["level"] = _worse(verdict["level"], row["level"])
            base = (baselines.get(profile) or {}).get(metric)
            if base and (base.get("median") or (m.kind == "count" and base.get("median") is not None)):
                verdict = judge(value, float(base["median"]), float(base.get("mad") or 0), m, settings)
                row["baseline"] = {"median": base["median"], "mad": base.get("mad") or 0, **verdict}
                row["level"] = _worse(verdict["level"], row["level"])
            row["share"] = (row.get("fleet") or {}).get("share")
            entry["metrics"][metric] = row
            entry["level"] = _worse(row["level"], entry["level"])
        entry["worst"] = worst(entry)
        nodes[node] = entry
    fleet = []
    for (profile, unit, metric), g in ref.items():
        base = (baselines.get(profile) or {}).get(metric)
        count = METRICS[metric].kind == "count"
        if unit or not base or not g["judged"] or not (base.get("median") or (count and base.get("median") is not None)):
            continue
        v = judge(g["median"], float(base["median"]), 0.0, METRICS[metric], settings)
        fleet.append({"profile": profile, "metric": metric, "median": g["median"], "baseline": base["median"],
                      "share": v["share"], "level": v["level"]})
    return {"nodes": nodes, "groups": groups, "fleet": fleet,
            "settings": {"warn_percent": settings.warn_percent, "fail_percent": settings.fail_percent,
                         "min_nodes": settings.min_nodes, "mad_k": settings.mad_k}}


def worst(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The metric and reference that put the node at its level: the one furthest from its median."""
    best: tuple[float, dict[str, Any]] | None = None
    for metric, row in entry["metrics"].items():
        if row["level"] != entry["level"] or entry["level"] in ("none", "ok"):
            continue
        for scope in ("fleet", "su", "baseline"):
            r = row.get(scope)
            if not r or r["level"] != row["level"]:
                continue
            if r.get("limit") is not None:  # an error count: how far past its allowance
                off = row["value"] / r["limit"] - 1 if r["limit"] else float(row["value"])
            elif r["share"] is None:
                continue
            else:
                off = abs(1 - r["share"])
            if best is None or off > best[0]:
                best = (off, {"metric": metric, "scope": scope, "su": entry["unit"], "value": row["value"], "unit": row["unit"],
                              "median": r["median"], "share": r["share"], "level": r["level"],
                              **({"limit": r["limit"]} if r.get("limit") is not None else {})})
    return best[1] if best else None


def describe(w: dict[str, Any]) -> str:
    """`stress-tflops 612 = 81% of fleet median 756` (the drain reason's detail)."""
    ref = {"fleet": "fleet median", "su": f"fleet median of {w.get('su') or 'its unit'}",
           "baseline": "baseline median"}[w["scope"]]
    if w.get("limit") is not None:  # an error count: `hca-symbol-errors 240 in the burn-in, fleet median 0 (warns from 10)`
        return f"{w['metric']} {_num(w['value'])} in the burn-in, {ref} {_num(w['median'])} (warns from {_num(w['limit'])})"
    return f"{w['metric']} {_num(w['value'])} = {w['share'] * 100:.0f}% of {ref} {_num(w['median'])}"


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def baseline_from(result: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """profile -> metric -> {median, mad, nodes}: the judged profile-wide groups of an evaluation
    (what a passed sweep contributes as a baseline)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for g in result["groups"]:
        if not g["unit"] and g["judged"]:
            out.setdefault(g["profile"], {})[g["metric"]] = {"median": g["median"], "mad": g["mad"],
                                                            "nodes": g["nodes"]}
    return out


def shares(entry: dict[str, Any] | None) -> dict[str, float]:
    """metric -> share of the fleet median (for the history, status and exporter)."""
    if not entry:
        return {}
    return {m: r["share"] for m, r in entry["metrics"].items() if r.get("share") is not None}
